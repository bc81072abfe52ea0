"""uvicorn's server, waking once a second instead of ten times when nothing happens.

uvicorn's main loop sleeps 0.1 s between ticks to refresh the Date header (once a second) and to
notice `should_exit`; serve runs two of them (the API and the metrics listener) for weeks, and those
20 wake-ups a second were a third of an idle serve's CPU (issue 20: idle under 1 % of a core).
Requests are served by the event loop as they arrive, whatever the tick; only shutdown notices
`should_exit` up to a second later.
"""

from __future__ import annotations

import asyncio

import uvicorn

TICK_S = 1.0


class QuietServer(uvicorn.Server):
    async def main_loop(self) -> None:
        ticks = 0
        should_exit = await self.on_tick(0)
        while not should_exit:
            ticks = (ticks + 1) % 86400
            await asyncio.sleep(TICK_S)
            # on_tick refreshes the Date header when its counter is a multiple of 10 (uvicorn counts tenths)
            should_exit = await self.on_tick(ticks * 10)
