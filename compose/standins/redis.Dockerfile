# Stand-in for the official redis image (make compose-check only): Debian's redis-server
# on the locally built Debian base; the stack's command decides where it listens.
ARG BASE
FROM ${BASE}
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown redis /data
USER redis
WORKDIR /data
CMD ["redis-server"]
