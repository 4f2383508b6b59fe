"""The exceptions, one per C status code (capi/hetero.h). InvalidArgument is also a
ValueError and Timeout a TimeoutError, so code that catches the built-in kinds keeps working."""


class HeteroError(Exception):
    """A hetero_* call failed; `status` is the C status name, the message hetero's."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class InvalidArgument(HeteroError, ValueError): pass
class NotFound(HeteroError): pass
class Unsupported(HeteroError): pass
class OutOfMemory(HeteroError): pass
class DeviceError(HeteroError): pass
class Timeout(HeteroError, TimeoutError): pass
class Cancelled(HeteroError): pass
class Busy(HeteroError): pass
class Internal(HeteroError): pass


# hetero_status values, HETERO_INVALID_ARGUMENT (1) to HETERO_INTERNAL (9).
BY_STATUS = {1: InvalidArgument, 2: NotFound, 3: Unsupported, 4: OutOfMemory, 5: DeviceError, 6: Timeout,
             7: Cancelled, 8: Busy, 9: Internal}


def invalid(message):
    """A bad value found before the C ABI was called."""
    return InvalidArgument("HETERO_INVALID_ARGUMENT", message)
