# Stand-in for python:3.11-slim-bookworm (PYTHON_IMAGE) where no registry is reachable (tests/deploy):
# Debian's Python 3.11 on the debootstrap base, with what the official image has that the stack uses:
# venv, pip, CA certificates, and Python's headers (torch's inductor compiles against Python.h in vLLM's
# CPU engine).
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3-pip python3.11-dev \
        ca-certificates \
    && ln -s /usr/bin/python3.11 /usr/local/bin/python \
    && rm -rf /var/lib/apt/lists/*
CMD ["python3.11"]
