"""How Model.fit ends on a signal that lands in any call the engine makes into Python, and at
Python's exit while a fit runs in another thread: the step reached is saved, nothing leaks."""
import os

from test_model import demo, run_script  # noqa: F401 (demo is a fixture)


def test_a_signal_as_the_run_gives_or_takes_back_its_access_interrupts_it(demo, tmp_path):
    """The engine's set_access call went around the interrupt handling of the other hooks: a
    SIGTERM there escaped fit as a raw fit_hooks.Terminated (exit 1), a Ctrl-C as a bare
    KeyboardInterrupt with nothing said of the save. The signal is sent from inside set_access."""
    result = run_script(demo, tmp_path, """
from enhanced import fit_hooks
original = fit_hooks.Bridge.set_access
for when in ("start", "end"):
    for name in ("SIGINT", "SIGTERM"):
        def set_access(self, access):
            if (access is None) == (when == "end"):
                os.kill(os.getpid(), getattr(signal, name))  # handled at the next bytecode, in here
                sum(range(1000))
            original(self, access)
        fit_hooks.Bridge.set_access = set_access
        out = sys.argv[2] + when + name
        try:
            model.fit(x, y, epochs=2, batch_size=16, out=out, verbose=0)
            print(when, name, "returned")
        except SystemExit as e:
            print(when, name, "SystemExit", e.code, os.path.exists(os.path.join(out, "last.safetensors")))
        except KeyboardInterrupt as e:
            print(when, name, type(e).__name__, "saved in" in str(e),
                  os.path.exists(os.path.join(out, "last.safetensors")))
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "start SIGINT KeyboardInterrupt True True", "start SIGTERM SystemExit 143 True",
        "end SIGINT KeyboardInterrupt True True", "end SIGTERM SystemExit 143 True"], result.stderr
    assert result.stderr.count("training terminated (SIGTERM): the step reached is saved in") == 2
