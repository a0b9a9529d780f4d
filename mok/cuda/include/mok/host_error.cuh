// Host-side error reporting shared by the launch functions (csrc/*.cu): format a message into the caller's
// buffer and return 1, so a launch function reads `if (bad) return fail(msg, len, "...", ...);`.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdio>

namespace mok {

inline int fail(char* message, size_t message_len, const char* format, ...) {
  if (message != nullptr && message_len > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(message, message_len, format, args);
    va_end(args);
  }
  return 1;
}

}  // namespace mok
