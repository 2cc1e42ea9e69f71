#!/bin/bash
# `zkServer.sh status` as the official image's health probe uses it: exit 0 while the
# server at ZOO_CLIENT_ADDRESS:2181 serves (its `srvr` answer names its mode).
[ "${1:-}" = status ] || { echo "stand-in: only 'status'" >&2; exit 2; }
exec 3<>"/dev/tcp/${ZOO_CLIENT_ADDRESS:-127.0.0.1}/2181" || exit 1
printf srvr >&3
answer=$(timeout 3 cat <&3) || true
grep -q '^Mode: ' <<<"$answer" && { grep '^Mode: ' <<<"$answer"; exit 0; }
exit 1
