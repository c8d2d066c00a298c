"""A settable clock for storage tests: time moves only when a test says so."""


class FakeClock:
    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms
