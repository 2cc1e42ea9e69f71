"""netdisco: an asyncio crawler framework whose engines form a ZooKeeper-monitored cluster."""

__version__ = "0.1.0"
