"""Event transport: the event-log port, its SQLite and Kafka adapters, and the workers that drain it."""
