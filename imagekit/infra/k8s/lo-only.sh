#!/bin/sh
# CNI "network" for a loopback-only machine: the Pod netns keeps only 'lo', the Pod IP is reported
# as 127.0.0.1. No interfaces or routes are made, so use exec probes, not httpGet/tcpSocket.
cat >/dev/null
case "$CNI_COMMAND" in
  ADD) printf '{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"%s"}],"ips":[{"version":"4","address":"127.0.0.1/8","interface":0}],"dns":{}}\n' "$CNI_NETNS" ;;
  VERSION) printf '{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0"]}\n' ;;
esac
exit 0
