"""Build and drive the Schäler et al. Java benchmark harness, to time its mechanisms beside ours.

The harness is the public repository https://github.com/chryenix/streamdp-benchmark (Schäler,
Hütter, Schäler, PVLDB 16(8), 2023). Nothing of it is vendored here: ``build`` takes a checkout of
it (a folder with its ``src/`` and ``lib/``), compiles its sources with the machine's ``javac`` as its
own ``scripts/diff-privacy-experiments.sh`` does, plus one small driver class written below (ours),
and ``HarnessSession`` starts one JVM that keeps running, so that its timings are interleaved with
ours, batch by batch, in the same process tree and on the same machine.

The driver does what ``Experiment.runArtificalExperiments`` sets up (``Mechansim.TRUNCATE = false``,
``RescueDP1D.USE_KALMAN_FILTER = true``, ``LaplaceStream.USAGE_MODE_RANDOM``: noise recycled from its
pool of 10^7 pre-drawn Laplace values) and, per batch, runs ``m.run(stream, w, ε)`` once per run, stream
and ε, a new mechanism object per stream as ``runAll_eHist`` makes one; the pool is drawn before
any timing. It times the mechanism's runs only (not the harness's MAE/MRE, its result files, nor its
``System.gc()`` per mechanism: ours is timed without metrics too) as the JVM's process CPU time
(``OperatingSystemMXBean.getProcessCpuTime``: every thread, so the JIT compiler's and the garbage
collector's work count), after a warm-up pass per mechanism. ``JVM_FLAGS`` is the tuned build.

    session = HarnessSession(build(Path("/tmp/streamdp-benchmark")), streams)
    cpu_seconds = session.run("BD", 120, (0.1, 0.3), runs=100, streams=("s40-a10",))
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import numpy as np

HARNESS_URL = "https://github.com/chryenix/streamdp-benchmark"
ENVIRONMENT = "BUDGETCHECK_HARNESS"  # a checkout of the harness, when --harness is not given
# The tuned build: the parallel collector on a fixed 1 GiB heap (no resizing; the young generation
# large enough for a batch's short-lived release lists), pages touched at start, not while timing, and
# explicit collections ignored (RescueDP_MD.run ends with System.gc(): a full collection of the
# 80 MB noise pool per run, 10x the CPU of its own work).
JVM_FLAGS = ("-XX:+UseParallelGC", "-Xms1g", "-Xmx1g", "-Xmn512m", "-XX:+AlwaysPreTouch", "-XX:+DisableExplicitGC")
# Our name -> the harness's class (Experiment.getInstance), for the nine mechanisms both have.
CLASSES = {
    "Uniform": "Uniform",
    "Sample": "Sample",
    "BD": "BD",
    "BA": "BA",
    "FASTw": "FAST_w",
    "DSATw": "DSAT",
    "RescueDP": "RescueDP_MD",  # the artificial grid's RESCUE_DP_MD
    "AdaPub": "AdaPub",
    "PeGaSus": "Pegasus",
}
LIBRARIES = ("lib/colt.jar", "lib/commons-math3-3.6.1.jar")


@attrs.frozen
class Timing:
    """What the driver reports for one batch: the JVM's process CPU seconds (every thread: the
    granularity is the kernel's clock tick, 10 ms here), its main thread's CPU seconds (exact), and
    the timestep-runs it made."""

    cpu: float
    thread_cpu: float
    timestep_runs: int


_DRIVER = """
import java.io.*;
import java.lang.management.ManagementFactory;
import java.util.*;
import experiment.LaplaceStream;
import mechanisms.*;

/** budgetcheck's timing driver: runs the harness's mechanisms on given streams, reports CPU time. */
public class BudgetcheckTiming {
    static Mechansim make(String name) {
        switch (name) {
%(cases)s
            default: throw new IllegalArgumentException("no such mechanism: " + name);
        }
    }

    public static void main(String[] args) throws Exception {
        Mechansim.TRUNCATE = false;  // as Experiment.runArtificalExperiments sets them
        RescueDP1D.USE_KALMAN_FILTER = true;
        LaplaceStream.USAGE_MODE = LaplaceStream.USAGE_MODE_RANDOM;
        LaplaceStream.nextNumber();  // the pool of 10^7 Laplace values is drawn here, before any timing
        Map<String, ArrayList<double[]>> streams = new LinkedHashMap<>();
        BufferedReader file = new BufferedReader(new FileReader(args[0]));
        for (String line; (line = file.readLine()) != null; ) {
            String[] fields = line.split(",");
            ArrayList<double[]> stream = new ArrayList<>(fields.length - 1);
            for (int t = 1; t < fields.length; t++) {
                stream.add(new double[] {Double.parseDouble(fields[t])});
            }
            streams.put(fields[0], stream);
        }
        file.close();
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        PrintStream reply = System.out;
        System.setOut(new PrintStream(OutputStream.nullOutputStream()));  // the mechanisms' own prints
        System.setErr(new PrintStream(OutputStream.nullOutputStream()));
        reply.println("READY");
        reply.flush();
        for (String line; (line = in.readLine()) != null; ) {
            // run MECHANISM W EPS[,EPS...] RUNS STREAM[,STREAM...]
            String[] f = line.trim().split(" ");
            if (!f[0].equals("run")) break;
            try {
            int w = Integer.parseInt(f[2]);
            String[] epsilons = f[3].split(",");
            int runs = Integer.parseInt(f[4]);
            double checksum = 0.0;
            long count = 0;
            long cpu = os.getProcessCpuTime(), wall = System.nanoTime();
            long thread = ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
            for (String name : f[5].split(",")) {
                ArrayList<double[]> stream = streams.get(name);
                Mechansim m = make(f[1]);  // runAll_eHist: one object per mechanism and stream
                for (String e : epsilons) {
                    double eps = Double.parseDouble(e);
                    m.epsilon = eps;
                    for (int r = 0; r < runs; r++) {
                        ArrayList<double[]> released = m.run(stream, w, eps);
                        checksum += released.get(released.size() - 1)[0];
                        count += stream.size();
                    }
                }
            }
            thread = ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime() - thread;
            cpu = os.getProcessCpuTime() - cpu;
            wall = System.nanoTime() - wall;
            reply.println("RESULT " + cpu + " " + thread + " " + wall + " " + count + " " + checksum);
            } catch (RuntimeException error) {
                reply.println("ERROR " + error);
            }
            reply.flush();
        }
    }
}
"""


def checkout(given: str | None) -> Path | None:
    """The harness checkout: ``given`` (--harness), else the BUDGETCHECK_HARNESS variable, else None."""
    folder = given or os.environ.get(ENVIRONMENT)
    if not folder:
        return None
    path = Path(folder)
    if not (path / "src" / "experiment" / "DP_BENCH.java").is_file():
        raise SystemExit(f"--harness {folder}: not a checkout of {HARNESS_URL} (no src/experiment/DP_BENCH.java)")
    return path


def driver_source() -> str:
    """The Java source of the timing driver (ours), for the nine mechanisms both have."""
    cases = "\n".join(f'            case "{ours}": return new {java}();' for ours, java in CLASSES.items())
    return _DRIVER % {"cases": cases}


def build(harness: Path, into: Path | None = None) -> Path:
    """Compile the harness and the driver into ``into`` (a new temporary folder if None); return it.

    The command is the harness's own (scripts/diff-privacy-experiments.sh) with the driver added:
    ``javac -nowarn -sourcepath src -classpath lib/colt.jar:lib/commons-math3-3.6.1.jar -d OUT
    src/experiment/DP_BENCH.java OUT/BudgetcheckTiming.java`` (run in the checkout)."""
    javac = shutil.which("javac")
    if javac is None:
        raise SystemExit("javac not found: the harness needs a JDK (java 17 works)")
    out = into or Path(tempfile.mkdtemp(prefix="streamdp-harness-"))
    out.mkdir(parents=True, exist_ok=True)
    source = out / "BudgetcheckTiming.java"
    source.write_text(driver_source())
    classpath = ":".join(str(harness / jar) for jar in LIBRARIES)
    command = [javac, "-nowarn", "-sourcepath", "src", "-classpath", classpath, "-d", str(out)]
    subprocess.run([*command, "src/experiment/DP_BENCH.java", str(source)], cwd=harness, check=True)
    return out


class HarnessSession:
    """One JVM running the harness's mechanisms on ``streams`` (name -> (T, 1) values), batch by batch."""

    def __init__(
        self,
        harness: Path,
        classes: Path,
        streams: Mapping[str, np.ndarray],
        flags: Sequence[str] = JVM_FLAGS,
    ) -> None:
        self.command = [
            shutil.which("java") or "java",
            *flags,
            "-cp",
            ":".join([str(classes), *(str(harness / jar) for jar in LIBRARIES)]),
            "BudgetcheckTiming",
        ]
        self._folder = tempfile.TemporaryDirectory(prefix="streamdp-streams-")
        data = Path(self._folder.name) / "streams.csv"
        with data.open("w") as file:
            for name, values in streams.items():
                if values.ndim != 2 or values.shape[1] != 1:
                    raise ValueError(f"streams[{name!r}]: the driver takes one column, got shape {values.shape}")
                file.write(name + "," + ",".join(repr(float(v)) for v in values[:, 0]) + "\n")
        self.command.append(str(data))
        self._process = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=harness
        )
        while self._read() != "READY":  # the harness prints its pool's progress first
            pass

    def _read(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the harness's JVM ended (exit {self._process.wait()}): {' '.join(self.command)}")
        return line.strip()

    def run(self, mechanism: str, w: int, epsilons: Sequence[float], runs: int, streams: Sequence[str]) -> Timing:
        """The timing of ``runs`` runs of ``mechanism`` per stream and ε."""
        assert self._process.stdin is not None
        eps = ",".join(repr(float(e)) for e in epsilons)
        self._process.stdin.write(f"run {mechanism} {w} {eps} {runs} {','.join(streams)}\n")
        self._process.stdin.flush()
        line = self._read()
        while not line.startswith(("RESULT ", "ERROR ")):
            line = self._read()
        if line.startswith("ERROR "):
            raise RuntimeError(f"the harness's {mechanism} (w = {w}, ε = {eps}): {line[6:]}")
        fields = line.split()
        return Timing(int(fields[1]) / 1e9, int(fields[2]) / 1e9, int(fields[4]))

    def warm_up(self, mechanisms: Sequence[str], stream: str, runs: int = 100) -> dict[str, float]:
        """One pass per mechanism (w = 120, ε = 1) so that the JIT compiles the hot loops, then a
        second; returns the second's CPU seconds per timestep-run (its cost, to size batches by)."""
        cost = {}
        for name in mechanisms:
            self.run(name, 120, (1.0,), runs, (stream,))
            timing = self.run(name, 120, (1.0,), runs, (stream,))
            cost[name] = max(timing.cpu, timing.thread_cpu) / timing.timestep_runs
        return cost

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.write("quit\n")
            self._process.stdin.close()
            self._process.wait(timeout=30)
        self._folder.cleanup()

    def __enter__(self) -> HarnessSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
