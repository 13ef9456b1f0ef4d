#!/bin/sh
# keepalived's health check: this node's haproxy frontend must answer the API server's /livez.
set -eu
curl -sfk --max-time 2 -o /dev/null "https://127.0.0.1:36443/livez" || {
    echo "haproxy on 127.0.0.1:36443 does not reach a healthy kube-apiserver" >&2
    exit 1
}
