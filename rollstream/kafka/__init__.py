"""The Kafka layer: clients, topic admin, the schema store, the control topic, reading helpers.

Every part of the product reaches Kafka through here, so client settings (security, acks,
idempotence, isolation) are made in one place.
"""
