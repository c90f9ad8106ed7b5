"""The kernel sandbox a forked measured function runs in: nothing leaves but the answer pipe.

Installed in the forked child by :func:`confine`, before the function sees a value (Haeberlen, Pierce
and Narayan, "Differential Privacy Under Fire", USENIX Security 2011, §5: a microquery may not touch
anything but its answer). In order:

1. every descriptor but the answer pipe's write end is closed (``os.closerange``): no inherited file,
   pipe, socket or terminal;
2. every shared mapping is unmapped (``/proc/self/maps``, flag ``s``): a ``SharedMemory`` or anonymous
   ``mmap`` made before the fork would otherwise be memory the parent reads; so is every mapping of a
   file that is not loaded code (no executable mapping of it) nor a locale: the page cache is shared, so
   which pages of a file fn reads would stay visible to the parent (``mincore``, ``preadv2`` with
   ``RWF_NOWAIT``, read timing);
3. ``PR_SET_DUMPABLE`` 0 (no ptrace of the child, its ``/proc`` entries owned by root), ``RLIMIT_FSIZE``
   0 and ``RLIMIT_CORE`` 0;
4. a seccomp-bpf filter (libseccomp, through the ``pyseccomp`` ctypes binding) that denies every system
   call (``EPERM``) but the few an interpreter needs to compute on memory it has: reading, memory
   management, futexes, clocks, sleeping, signal masks of its own, ``getrandom``, exiting, threads
   (``clone`` with ``CLONE_THREAD``: never a new process), and ``write`` to the answer descriptor only.
   Denied among others: ``open``/``openat`` (no file is opened at all, not even to read: an open is
   seen through inotify, a FIFO or an access time), ``socket``, ``connect``, ``kill``/``tgkill``,
   ``ptrace``, ``fork``/``vfork``/``execve``, ``memfd_create``, ``shmget``/``shmat``, ``mknod``,
   ``rename``/``unlink``/``mkdir``, ``setpriority``, ``sched_setaffinity``, ``prctl``, ``ioctl``,
   ``dup*``, ``pipe*``. ``clone3`` (whose flags a filter cannot read) answers ``ENOSYS``, so that a
   C library falls back to ``clone``.

What a filter cannot stop is listed in ``docs/explanation/predictable-transactions.md``: while it runs
the child uses CPU and memory another process can notice (contention), and its exit is seen by the
parent's ``SIGCHLD`` and ``RUSAGE_CHILDREN``. The parent holds the call to a deadline (see
:mod:`budgetcheck.ledger.isolation`) so that none of this reaches the call's return.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import sys
import warnings

_CLONE_THREAD = 0x00010000
# what a thread's clone may not carry: a new parent, vfork, ptrace, or any namespace
_CLONE_NEVER = 0x00008000 | 0x00004000 | 0x00002000 | 0x00020000 | 0x7E000000
_PR_SET_DUMPABLE = 4
_LOCALES = (b"/usr/lib/locale/", b"/usr/share/locale/")  # the C library's own data, mapped at start-up

# the system calls the child may make (default: EPERM); write is allowed on the answer descriptor only
ALLOWED = (
    "read",
    "readv",
    "pread64",
    "close",
    "fstat",
    "lseek",
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "brk",
    "madvise",
    "futex",
    "set_robust_list",
    "get_robust_list",
    "rseq",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",
    "restart_syscall",
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "nanosleep",
    "clock_nanosleep",
    "getrandom",
    "getpid",
    "gettid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "sched_yield",
    "sched_getaffinity",
    "exit",
    "exit_group",
)


@functools.cache
def unavailable() -> str | None:
    """Why the sandbox cannot be installed on this machine, or None when it can (checked once per process:
    the platform, the binding and libseccomp, then a probe child that confines itself and answers)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return f"the sandbox needs Linux (seccomp-bpf), not {sys.platform}"
    try:
        import pyseccomp

        pyseccomp.SyscallFilter(pyseccomp.ERRNO(errno.EPERM))  # loads libseccomp.so.2
    except (ImportError, OSError, RuntimeError) as exc:
        return f"the sandbox needs libseccomp (libseccomp.so.2) and the pyseccomp binding: {exc}"
    if not _probe():
        return "the kernel refused the seccomp filter in a probe child (seccomp off, or a filter already forbids it)"
    return None


def _probe() -> bool:
    """Whether a forked child can :func:`confine` itself and then still write its answer (once per process)."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns on fork in a threaded process; the child only confines
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            confine(write_end)
            os.write(write_end, b"1")
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        return os.read(read_end, 1) == b"1"
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)


def confine(answer_fd: int) -> None:
    """Sandbox this (forked, single-threaded) process: only ``answer_fd`` stays writable; raises OSError
    (or the binding's error) if any step fails, and then the child must exit without running fn."""
    import pyseccomp

    os.closerange(0, answer_fd)
    os.closerange(answer_fd + 1, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16)
    _unmap_what_the_parent_sees()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    rules = pyseccomp.SyscallFilter(pyseccomp.ERRNO(errno.EPERM))
    for name in ALLOWED:
        rules.add_rule(pyseccomp.ALLOW, name)
    rules.add_rule(pyseccomp.ALLOW, "write", pyseccomp.Arg(0, pyseccomp.EQ, answer_fd))
    # a thread (of this process, under this filter), never a new process or namespace
    only_a_thread = pyseccomp.Arg(0, pyseccomp.MASKED_EQ, _CLONE_THREAD | _CLONE_NEVER, _CLONE_THREAD)
    rules.add_rule(pyseccomp.ALLOW, "clone", only_a_thread)
    rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.load()  # sets no_new_privs first (libseccomp's default)


def _unmap_what_the_parent_sees() -> None:
    """Unmap every shared mapping of this process (what a fork shares with its parent for writing) and every
    mapping of a data file (not code, not a locale: whose pages fn reads would show in the page cache)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    with open("/proc/self/maps", "rb") as maps:
        regions = [line.split(maxsplit=5) for line in maps]
    code = {fields[5].strip() for fields in regions if len(fields) == 6 and fields[1][2:3] == b"x"}
    for fields in regions:
        path = fields[5].strip() if len(fields) == 6 else b""
        data_file = path.startswith(b"/") and path not in code and not path.startswith(_LOCALES)
        if fields[1][3:4] == b"s" or data_file:
            start, end = (int(x, 16) for x in fields[0].split(b"-"))
            if libc.munmap(start, end - start) != 0:
                raise OSError(ctypes.get_errno(), f"munmap of {path.decode(errors='replace') or 'a shared mapping'}")
