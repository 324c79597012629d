"""Ports of a Runloop devbox: its V2 tunnel, enabled once, one URL per port.

Runloop gives a devbox one tunnel (``enable_tunnel``); every port of the devbox is reachable
through it at ``https://{port}-{tunnel_key}.tunnel.runloop.ai``, a URL the SDK builds
(``get_tunnel_url``) from the key and the API's host. The tunnel is opened ``open``: the
unguessable key in the host name is the capability, so the URL works in a browser and in any
HTTP client without a header (an ``authenticated`` tunnel would need
``X-Runloop-Tunnel-Authorization`` on every request). A devbox that already has a tunnel (made
by another process attached to the same devbox) keeps it: the key is read, not made again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_sandbox.providers.runloop.session import RunloopSession


async def tunnel_url(session: RunloopSession, port: int) -> str:
    """The URL of ``port`` of the session's devbox, enabling its tunnel the first time."""
    provider = session._provider
    devbox = provider.sdk().devbox.from_id(session.devbox_id)
    url = await provider._retry("read the tunnel", lambda: devbox.get_tunnel_url(port))
    if url is None:
        await provider._retry(
            "enable the tunnel",
            lambda: session._api().devboxes.enable_tunnel(session.devbox_id, auth_mode="open"),
        )
        url = await provider._retry("read the tunnel", lambda: devbox.get_tunnel_url(port))
    return str(url)
