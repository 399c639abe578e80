"""stages.py with Python's garbage collector on, off (gc.disable) or frozen (gc.freeze) before the model loads.
Usage (repository root): gc_off.py on|off|freeze POLICY ROUNDS"""
import gc, runpy, sys
mode = sys.argv.pop(1)
if mode == "off":
    gc.disable()
elif mode == "freeze":
    gc.freeze()
sys.argv[0] = "docs/results/host_work_2026-12-05/stages.py"
runpy.run_path(sys.argv[0], run_name="__main__")
