"""Saved logs and stores read after the fact: what `scan`, `advise --log` and `report` gather before a view renders.

- `saved`: saved logs read once, start to end, through the same parsers as the daemon (`scan`);
- `plain_lane`: `saved`'s plain files through the optional compiled lane (parsers/_lane.c), the same output;
- `parallel`: one large plain file read by several processes with the same output (`scan --jobs`);
- `load`: saved logs into a store (usually in memory), so `advise --log` and `report --log` judge them as
  the daemon would have;
- `report`: the report's data, gathered from a store's queries and the advisor's replay.
"""
