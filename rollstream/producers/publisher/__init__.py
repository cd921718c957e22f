"""The capture publisher: records to Kafka without losing one to an outage, a full disk or a stop.

``client`` holds ``CapturePublisher`` and its settings; the other modules are its parts (the
spool on disk and its lock, the adoption of spools whose publisher is gone, the backlog held
while the disk is full, the connection, delivery with acks, the rejected-record log and the
metrics).
"""
