"""Running the proxy: in the foreground until a signal (``sbconform record``), or on a
background thread (tests, benchmarks, embedding)."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import Callable

from .interpret import Recording
from .relay import DEFAULT_KEYS, MAX_CONNECTIONS, CbsRewriter, Describer, Proxy, parse_upstream
from .sink import PART_SECONDS, TraceSink


def build(upstream_text: str, out: str | Path, listen_host: str = "127.0.0.1", listen_port: int = 5673, fmt: str = "jsonl",
          rotate_bytes: int = 256 * 1024 * 1024, keys: dict[str, str] | None = None, describe: str = "auto",
          on_record_error: str = "relay", trace: str | None = None, record_attach: bool = False, say: Callable[[str], None] | None = None,
          part_seconds: float = PART_SECONDS, max_connections: int = MAX_CONNECTIONS) -> Proxy:
    upstream = parse_upstream(upstream_text)
    failed: list[str] = []
    holder: dict = {}

    def recording_failed(text: str) -> None:
        failed.append(text)
        (say or (lambda t: print(f"sbconform record: {t}", flush=True)))(text)
        proxy = holder.get("proxy")
        if proxy is not None and on_record_error == "stop" and proxy.rec.sink.failed is not None:
            proxy.request_stop()

    sink = TraceSink(out, trace, fmt, rotate_bytes, on_error=recording_failed, part_seconds=part_seconds,
                     upstream=f"{upstream.host}:{upstream.port}", upstream_tls=upstream.tls)
    rec = Recording(sink, CbsRewriter(upstream, dict(keys or DEFAULT_KEYS)), record_attach)
    describer = Describer(upstream, describe, say) if describe != "none" else None
    proxy = Proxy(upstream, rec, listen_host, listen_port, describer, on_record_error, say=say, max_connections=max_connections)
    proxy.describer_obj = describer  # type: ignore[attr-defined]
    holder["proxy"] = proxy
    return proxy


def finish(proxy: Proxy) -> None:
    d = getattr(proxy, "describer_obj", None)
    if d is not None:
        d.close()
    proxy.rec.sink.close()


async def serve_until_signal(proxy: Proxy, on_ready: Callable[[int], None]) -> None:
    port = await proxy.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, proxy.request_stop)
    on_ready(port)
    await proxy.wait_stopped()


class ProxyThread:
    """``ProxyThread(upstream, out).start()`` -> the port; ``stop()`` ends the recording
    cleanly (held sends written, the trace closed)."""

    def __init__(self, upstream: str, out: str | Path, **options) -> None:
        self.proxy = build(upstream, out, listen_port=options.pop("listen_port", 0), **options)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sbconform-record", daemon=True)
        self.port = 0
        self.error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.port = self.loop.run_until_complete(self.proxy.start())
        except BaseException as error:  # said by start()
            self.error = error
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_until_complete(self.proxy.wait_stopped())
        finish(self.proxy)

    def start(self) -> int:
        self.thread.start()
        self.ready.wait(30)
        if self.error is not None:
            raise self.error
        return self.port

    def stop(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.proxy.request_stop)
            self.thread.join(30)

    @property
    def sink(self) -> TraceSink:
        return self.proxy.rec.sink
