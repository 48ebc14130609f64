"""SDK throughput through the recording proxy (`sbconform record`) against direct, same run.

Starts `sbconform serve` (a queue "bench") and `sbconform record` in front of it, each in
its own process, then in this process runs the same workload alternately direct and through
the proxy (``--rounds`` times each, interleaved, so both see the same machine load):
batched sends (100 per batch), peek-lock receives (up to 100 per call) and a complete per
message, all through azure-servicebus. Each configuration's rate is the median of its
rounds. The proxy records everything as a JSON Lines trace (as `sbconform record` does by
default); the events it wrote are counted. Last line:
``proxy_msgs_per_s=<n> ratio=<proxy/direct>`` (target >= 0.7).

    .venv/bin/python benchmarks/proxy_overhead.py [--messages 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from azure.servicebus import ServiceBusClient, ServiceBusMessage  # noqa: E402

from sbconform.processes import stop_process  # noqa: E402
from sbconform.targets.sdk import ServeProcess  # noqa: E402

CONFIG = {"UserConfig": {"Namespaces": [{"Name": "bench", "Queues": [{"Name": "bench", "Properties": {"LockDuration": "PT1M", "MaxSizeInMegabytes": 5120}}]}]}}


def workload(cs: str, messages: int, batch_size: int, body: bytes) -> float:
    """Messages per second: send in batches, receive, complete each."""
    with ServiceBusClient.from_connection_string(cs) as client, client.get_queue_sender("bench") as sender, \
            client.get_queue_receiver("bench", prefetch_count=0) as receiver:
        sender.send_messages(ServiceBusMessage(body))  # warm up both links
        for m in receiver.receive_messages(1, max_wait_time=5):
            receiver.complete_message(m)
        start = time.perf_counter()
        sent = 0
        while sent < messages:
            batch = sender.create_message_batch()
            for _ in range(min(batch_size, messages - sent)):
                batch.add_message(ServiceBusMessage(body))
            sender.send_messages(batch)
            sent += len(batch)
        received = 0
        while received < messages:
            got = receiver.receive_messages(max_message_count=batch_size, max_wait_time=5)
            if not got:
                raise RuntimeError(f"only {received} of {messages} messages came back")
            for m in got:
                receiver.complete_message(m)
            received += len(got)
        return messages / (time.perf_counter() - start)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), 0.0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per configuration (interleaved; the median of each is compared)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body", type=int, default=64, help="body bytes per message")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "Config.json"
        config.write_text(json.dumps(CONFIG), encoding="utf-8")
        server = ServeProcess(["--config", str(config)])
        proxy = subprocess.Popen([sys.executable, "-m", "sbconform.cli", "record", "--listen", "127.0.0.1:0",
                                  "--upstream", server.connection_string, "--out", str(Path(tmp) / "trace")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = proxy.stdout.readline()
            match = re.search(r"listening on [^:]+:(\d+)", first)
            if not match:
                print(f"sbconform record did not start: {first}{proxy.stderr.read()}", file=sys.stderr)
                return 1
            proxied = proxy.stdout.readline().strip()
            body = b"x" * args.body
            direct_rates, proxy_rates = [], []
            proxy_cpu = 0.0
            for _ in range(args.rounds):
                direct_rates.append(workload(server.connection_string, args.messages, args.batch, body))
                before = cpu_seconds(proxy.pid)
                proxy_rates.append(workload(proxied, args.messages, args.batch, body))
                proxy_cpu += cpu_seconds(proxy.pid) - before
        finally:
            stop_process(proxy)
            server.stop()
        events = 0
        for f in (Path(tmp) / "trace").glob("*.jsonl"):
            with open(f, "rb") as fh:
                events += sum(1 for _ in fh) - 1
    direct, through = statistics.median(direct_rates), statistics.median(proxy_rates)
    print(f"direct rounds (msgs/s): {', '.join(f'{r:.0f}' for r in direct_rates)}")
    print(f"proxy rounds (msgs/s): {', '.join(f'{r:.0f}' for r in proxy_rates)}; {events} trace events recorded")
    print(f"proxy CPU per message (relay + recording): {proxy_cpu / (args.messages * args.rounds) * 1e6:.0f} us; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"direct_msgs_per_s={direct:.0f}")
    print(f"proxy_msgs_per_s={through:.0f} ratio={through / direct:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
