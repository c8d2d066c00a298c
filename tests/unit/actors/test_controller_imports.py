"""The controller starts every node's Kafka listener without loading the Kafka protocol itself.

Importing kio's schemas takes 0.8 s on an idle machine, far more at Ray's worker niceness on a
loaded one. The controller imports the listener actor's module to start it, once per node, and an
import of the protocol there held the controller's event loop (heartbeats, fencing, creations)
behind it: a topic creation beside a CPU hog waited 40 s and failed.
"""

import subprocess
import sys


def test_the_controller_and_the_listener_actor_module_load_no_kafka_protocol_module():
    code = (
        "import sys, actors.controller, actors.kafka_listener\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kio' or m.startswith('raylog.kafka')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
