"""Messages per second through the azure-servicebus SDK against `sbconform serve`.

Starts `sbconform serve` in a child process (a queue "bench"), then in this process: batched
sends (100 per batch), peek-lock receives (up to 100 per call) and a complete per message.
CPU time is measured in the same run on both sides: the client's with time.process_time(),
the server's through its $sbconform control node (its own process_time()). The last line is
``msgs_per_s=<n> server_cpu_over_client_cpu=<r>``.

    .venv/bin/python benchmarks/sdk_throughput.py [--messages 10000] [--batch 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from azure.servicebus import ServiceBusClient, ServiceBusMessage  # noqa: E402

from sbconform.targets.sdk import ControlClient, ServeProcess  # noqa: E402

CONFIG = {"UserConfig": {"Namespaces": [{"Name": "bench", "Queues": [{"Name": "bench", "Properties": {"LockDuration": "PT1M", "MaxSizeInMegabytes": 5120}}]}]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body", type=int, default=64, help="body bytes per message")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "Config.json"
        config.write_text(json.dumps(CONFIG), encoding="utf-8")
        server = ServeProcess(["--config", str(config)])
        try:
            control = ControlClient("127.0.0.1", server.port, "RootManageSharedAccessKey", "SAS_KEY_VALUE")
            client = ServiceBusClient.from_connection_string(server.connection_string)
            body = b"x" * args.body
            with client, client.get_queue_sender("bench") as sender, client.get_queue_receiver("bench", prefetch_count=0) as receiver:
                sender.send_messages(ServiceBusMessage(body))  # warm up both links
                for m in receiver.receive_messages(1, max_wait_time=5):
                    receiver.complete_message(m)
                server_cpu0 = control.call("cpu")["cpu"]
                client_cpu0 = time.process_time()
                start = time.perf_counter()
                sent = 0
                while sent < args.messages:
                    batch = sender.create_message_batch()
                    for _ in range(min(args.batch, args.messages - sent)):
                        batch.add_message(ServiceBusMessage(body))
                    sender.send_messages(batch)
                    sent += len(batch)
                send_done = time.perf_counter()
                received = 0
                while received < args.messages:
                    got = receiver.receive_messages(max_message_count=args.batch, max_wait_time=5)
                    if not got:
                        break
                    for m in got:
                        receiver.complete_message(m)
                    received += len(got)
                elapsed = time.perf_counter() - start
                client_cpu = time.process_time() - client_cpu0
                server_cpu = control.call("cpu")["cpu"] - server_cpu0
            control.close()
        finally:
            server.stop()
    if received < args.messages:
        print(f"only {received} of {args.messages} messages came back", file=sys.stderr)
        return 1
    rate = args.messages / elapsed
    print(f"sent {args.messages} in {send_done - start:.2f} s, received and completed in {elapsed - (send_done - start):.2f} s")
    print(f"client CPU {client_cpu:.2f} s ({client_cpu / args.messages * 1e6:.0f} us/msg), "
          f"server CPU {server_cpu:.2f} s ({server_cpu / args.messages * 1e6:.0f} us/msg)")
    # msgs_per_s is wall-clock: on a machine shared with other work it falls while the CPU per
    # message does not; this line says how much of the wall time the two processes got
    # the SDK client's own CPU per message bounds what any server can reach with one client
    # process: one core spent on the client alone moves at most this many messages per second
    print(f"the client alone caps one client process at {args.messages / client_cpu:.0f} msgs/s "
          f"(one core of its CPU per message; {os.cpu_count()} cores here, shared with the server)")
    print(f"client+server CPU {(client_cpu + server_cpu) / elapsed:.2f} of the wall time; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"msgs_per_s={rate:.0f} server_cpu_over_client_cpu={server_cpu / client_cpu:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
