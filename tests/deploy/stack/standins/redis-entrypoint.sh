#!/bin/sh
# redis-server without a config file keeps protected mode on: the official image turns it off.
set -eu
if [ "$1" = redis-server ]; then
    shift
    exec redis-server --protected-mode no "$@"
fi
exec "$@"
