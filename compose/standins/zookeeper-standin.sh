#!/bin/bash
# Writes zoo.cfg from the environment (the official image's ZOO_* variables that the
# stack sets) and runs ZooKeeper in the foreground.
set -euo pipefail
cfg=/data/zoo.cfg
cat > "$cfg" <<CFG
tickTime=2000
dataDir=/data/version-data
clientPort=2181
clientPortAddress=${ZOO_CLIENT_ADDRESS}
admin.enableServer=false
4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}
maxClientCnxns=0
CFG
exec java -Xmx256m -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"
