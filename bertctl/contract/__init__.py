"""The artifact contract, in one room: what an artifact is and how it is written and read
(artifacts.py: plan, produce, read, check), its manifest (manifest.py), its id (identity.py),
where its files go and how they are put in place whole (placement.py), the lock on an output
(locks.py), and the signals that unwind a run cleanly (signals.py). docs/artifacts.md is the
contract in prose."""
