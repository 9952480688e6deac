"""How devices reach Home Assistant: OTA check-in, WebSocket, MQTT + UDP, uploads."""
