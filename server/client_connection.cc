#include "server/client_connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace hetero::serve {
namespace {

// The address and port of a socket address, as httplib writes them.
bool AddressAndPort(const sockaddr_storage& a, std::string& address, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    if (inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text)) == nullptr) return false;
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text)) == nullptr) return false;
    port = ntohs(v6.sin6_port);
  } else {
    return false;
  }
  address = text;
  return true;
}

}  // namespace

ClientConnection ClientConnection::Find(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return ClientConnection(-1);
  int found = -1;
  while (dirent* entry = readdir(fds)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_size = sizeof(local), peer_size = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) {
      continue;  // not connected (the listening socket, among others)
    }
    std::string local_address, peer_address;
    int local_p = -1, peer_p = -1;
    if (!AddressAndPort(local, local_address, local_p) || !AddressAndPort(peer, peer_address, peer_p)) continue;
    if (local_p == local_port && peer_p == remote_port && peer_address == remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(fds);
  return ClientConnection(found);
}

bool ClientConnection::Open() const {
  if (fd_ < 0) return true;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return true;                                           // the client sent more (a next request)
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;  // nothing to read: open
  return false;                                                     // end of file: closed
}

}  // namespace hetero::serve
