"""Session turns of a replayed request file, sent in order, each with the conversation so far."""

from __future__ import annotations

import asyncio

from selector.engines.spec import Send
from selector.generation import GenerationRequest, Messages, ReplayRequest
from selector.trace import RequestTrace


class Conversations:
    """Wraps a send so session turns go in order, each with the conversation so far.

    Turn k waits until turn k-1 has finished (a person reads the reply before writing the next
    message); its trace starts when it is sent, so that wait is not counted as latency. Turn 1
    starts a session afresh, so the same requests replay identically at every level."""

    def __init__(self) -> None:
        self.history: dict[str, Messages] = {}
        self.done: dict[tuple[str, int], asyncio.Future[None]] = {}
        self.sent: list[GenerationRequest] = []  # what actually went out, in send order (for tests)

    def _done(self, session: str, turn: int) -> asyncio.Future[None]:
        key = (session, turn)
        if key not in self.done:
            self.done[key] = asyncio.get_running_loop().create_future()
        return self.done[key]

    def wrap(self, send: Send) -> Send:
        async def sending(request: GenerationRequest) -> RequestTrace:
            if not isinstance(request, ReplayRequest) or request.session is None:
                self.sent.append(request)
                return await send(request)
            s, k = request.session, request.turn
            if k == 1:
                self.history[s] = []
                for key in [key for key in self.done if key[0] == s]:
                    del self.done[key]
            else:
                await self._done(s, k - 1)
            asked = list(request.prompt) if isinstance(request.prompt, list) else [
                {"role": "user", "content": request.prompt}]
            messages = [*self.history[s], *asked]
            turn = GenerationRequest(messages, request.max_new_tokens, list(request.stop),
                                     cache_salt=request.cache_salt)  # the session's: its turns share their history
            self.sent.append(turn)
            try:
                trace = await send(turn)
                self.history[s] = [*messages, {"role": "assistant", "content": trace.text}]
                return trace
            finally:  # a failed turn still lets the conversation go on
                self.history.setdefault(s, messages)
                done = self._done(s, k)
                if not done.done():
                    done.set_result(None)

        return sending
