"""A device's MQTT connection and UDP audio channel, as its session's link.

Over MQTT a device stays connected between conversations; each conversation
opens a UDP channel with a fresh AES key (``udp.py``), announced in the
server's hello. The device publishes to its own topic; the server's messages
go down the same connection (the firmware never subscribes).
"""

from collections.abc import Callable, Coroutine
import logging
from typing import Any

from ..audio.preroll import Heard
from ..messages import DeviceHello
from ..ota import topics
from ..session import DeviceSession
from .server import MqttConnection
from .udp import AudioChannel, UdpEndpoint

_LOGGER = logging.getLogger(__name__)

type Spawn = Callable[[Coroutine[Any, Any, None]], object]


class MqttLink:
    """A logged-in MQTT connection, as a :class:`~..link.Link`.

    It is also the connection's :class:`~.server.MqttClient`: set
    :attr:`session` to the session it feeds.
    """

    transport = "mqtt"
    always_on = True

    def __init__(
        self,
        connection: MqttConnection,
        mac: str,
        udp: Callable[[], UdpEndpoint | None],
        *,
        identity: str,
        spawn: Spawn | None = None,
    ) -> None:
        """Wrap the connection of the device ``mac``, logged in as ``identity``.

        ``udp`` returns the UDP endpoint in service (None: it is down).
        ``spawn`` runs the session's teardown when the connection ends (by
        default, as a task of the session).
        """
        self.identity = identity
        self._connection = connection
        self._udp = udp
        self._spawn = spawn
        self.publish_topic, self._topic_down = topics(mac)
        self._channel: AudioChannel | None = None
        self._foreign_topics = 0
        self.session: DeviceSession | None = None

    @property
    def remote(self) -> str | None:
        """Return the device's address."""
        return self._connection.peer

    @property
    def channel(self) -> AudioChannel | None:
        """Return the open audio channel, if any."""
        return self._channel

    def open_audio(self, hello: DeviceHello) -> dict[str, Any]:
        """Open a UDP channel with a fresh key; return the hello's fields."""
        self.close_audio()
        udp = self._udp()
        if udp is None or udp.port is None:
            _LOGGER.warning("The UDP audio endpoint is down: no audio channel")
            return {"transport": "udp"}
        frame_ms = hello.audio_params.get("frame_duration")
        self._channel = udp.open_channel(
            self._connection.peer,
            self._audio,
            float(frame_ms) if isinstance(frame_ms, int | float) else None,
        )
        return {
            "transport": "udp",
            "udp": self._channel.hello_fields(self._connection.local, udp.port),
        }

    def close_audio(self) -> None:
        """Close the audio channel."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    async def send_text(self, text: str) -> None:
        """Publish a message to the device's connection."""
        self._connection.publish(self._topic_down, text.encode())

    async def send_audio(self, payload: bytes, timestamp: int) -> None:
        """Send an Opus packet on the audio channel, once the device is heard."""
        if self._channel is None:
            raise ConnectionError("no audio channel")
        await self._channel.send_when_heard(payload, timestamp)

    async def close(self, message: str) -> None:
        """Close the MQTT connection."""
        _LOGGER.debug("Closing MQTT connection of %s: %s", self.remote, message)
        self._connection.close()

    # --- MqttClient -------------------------------------------------------

    def mqtt_message(self, topic: str, payload: bytes) -> None:
        """Take what the device published to its own topic."""
        session = self.session
        if session is None:
            return
        if topic != self.publish_topic:
            self._foreign_topics += 1
            level = logging.WARNING if self._foreign_topics == 1 else logging.DEBUG
            _LOGGER.log(
                level, "Ignoring a message from %s to topic %r", self.remote, topic
            )
            return
        session.feed_text(payload.decode("utf-8", "replace"))

    def mqtt_closed(self) -> None:
        """Close the audio channel and end the session."""
        self.close_audio()
        if (session := self.session) is not None:
            lost = session.connection_lost()
            if self._spawn is None:
                session.spawn(lost)
            else:
                self._spawn(lost)

    def _audio(self, payload: bytes, heard: Heard) -> None:
        if (session := self.session) is not None:
            session.feed_audio(payload, heard)
