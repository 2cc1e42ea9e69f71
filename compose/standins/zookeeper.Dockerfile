# Stand-in for the official zookeeper image (make compose-check only): Debian's zookeeper
# on the locally built Debian base, listening on ZOO_CLIENT_ADDRESS:2181 of the host
# network. zkServer.sh status answers like the official image's health probe.
ARG BASE
FROM ${BASE}
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
       zookeeper default-jre-headless \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data && chown zookeeper /data
COPY zookeeper-standin.sh /usr/local/bin/zookeeper-standin
COPY zkServer.sh /usr/local/bin/zkServer.sh
USER zookeeper
ENV ZOO_CLIENT_ADDRESS=127.0.0.1
CMD ["zookeeper-standin"]
