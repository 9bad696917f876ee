# first-start --launch: loaded in every process of the rehearsal launch (PYTHONPATH), it records each weight sync's
# engine-vs-trainer comparison (bench/gpu/sync_probe.py) when TRLVR_SYNC_PROBE names a folder.
import sync_probe

sync_probe.install()
