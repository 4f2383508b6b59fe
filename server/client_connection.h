// Whether the client of a request is still connected, for requests that are not streamed:
// Debian's cpp-httplib (0.11.4) tells a handler nothing about its connection, and a streamed
// response learns of a closed one only when a write fails. The socket is found by its
// addresses (the request's local and remote address and port name exactly one connected
// socket of this process), and a client that has closed its end reads as end of file.
#ifndef HETERO_SERVER_CLIENT_CONNECTION_H_
#define HETERO_SERVER_CLIENT_CONNECTION_H_

#include <string>

namespace hetero::serve {

class ClientConnection {
 public:
  // The connection serving a request from remote_addr:remote_port to local_port; one whose
  // socket cannot be found reads as open (nothing is cancelled on a guess).
  static ClientConnection Find(const std::string& remote_addr, int remote_port, int local_port);

  // False once the client has closed the connection. Cheap (one non-blocking peek), safe
  // from any thread while the request is being served.
  bool Open() const;

  bool found() const { return fd_ >= 0; }

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace hetero::serve

#endif  // HETERO_SERVER_CLIENT_CONNECTION_H_
