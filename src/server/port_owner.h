// port_owner: who is listening on a TCP port of this machine, for the error a busy port gives
// ("port 8080 is in use by kapitsa (pid 1234)"). Linux only (/proc/net/tcp*, /proc/<pid>/fd); an
// empty string when it cannot tell (another user's process, no /proc).
#pragma once

#include <string>

namespace kapitsa::server {

std::string port_owner(int port);

}  // namespace kapitsa::server
