"""The firmware's MQTT + UDP transport: MQTT 3.1.1 packets, the endpoint, UDP audio."""
