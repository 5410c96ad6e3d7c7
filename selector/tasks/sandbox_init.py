"""The sandbox's first steps inside its namespaces: lock the file system, drop privileges, run the program.

selector/tasks/sandbox.py passes the text of this file to `python -I -S -c` under
`unshare --user --map-root-user --net --mount --pid`, so it starts as root of a new user namespace
(root only there: outside, it is the sandbox's unprivileged user), and its first child will be
PID 1 of a new PID namespace. It needs only the standard library, and is not imported.

    python -I -S -c "<this file>" FOLDER READ_ONLY INTERPRETER SCRIPT

It forks. The parent stays outside the new PID namespace, waits for the child and ends the way it
ended (the same exit status, or killed by the same signal), since PID 1 cannot be killed by a
signal of its own. The child, PID 1 of the new namespace:
1. dies with the parent (PR_SET_PDEATHSIG), so killing the parent's process group on a timeout
   kills it too, also after it called setsid(); mounts this namespace's own /proc;
2. with READ_ONLY=1, makes every mount read-only, recursively (mount_setattr, Linux 5.12+); then
   FOLDER, the run's own, is bind-mounted over itself and made writable again. /proc stays
   writable: step 3 writes to it. /dev/shm becomes a private, empty 16 MiB tmpfs;
3. moves into a nested user namespace where it is uid and gid 65534 ("nobody"; outside, still the
   sandbox's user) and sets no_new_privs. After the exec below it holds no capabilities, so the
   program cannot remount anything writable (root of the first namespace could), and no set-uid
   file gives any back;
4. execs `INTERPRETER -I SCRIPT` in FOLDER. The program stays PID 1: when it exits or is killed,
   the kernel kills every process left in its namespace, setsid() or not. As PID 1 it ignores
   signals it has no handler for, SIGXCPU included: the CPU limit's SIGKILL a second later ends it.

A step that fails ends the process with status 125 and a line on stderr starting "sandbox setup failed".
"""

import ctypes
import os
import signal
import sys

SETUP_FAILED = 125
CLONE_NEWUSER = 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND = 0x2, 0x4, 0x8, 0x1000
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same on every architecture but alpha (syscalls added since 5.1 share numbers)
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
INSIDE_ID = 65534

libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def fail(step: str, errno: int) -> None:
    sys.stderr.write(f"sandbox setup failed: {step}: {os.strerror(errno)}\n")
    sys.stderr.flush()
    os._exit(SETUP_FAILED)


def check(result: int, step: str) -> None:
    if result != 0:
        fail(step, ctypes.get_errno())


def set_read_only(path: str, read_only: bool, recursive: bool) -> None:
    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0) if read_only else MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    # syscall() takes longs: pass each argument at its full width
    check(libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_long(AT_FDCWD), ctypes.c_char_p(os.fsencode(path)),
                       ctypes.c_long(flags), ctypes.byref(attr), ctypes.c_long(ctypes.sizeof(attr))),
          f"make {path} {'read-only' if read_only else 'writable'}")


def wait_and_end_alike(child: int) -> None:
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


def main(folder: str, read_only: str, interpreter: str, script: str) -> None:
    child = os.fork()
    if child:
        wait_and_end_alike(child)
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "set the parent-death signal")
    check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")
    if read_only == "1":
        check(libc.mount(os.fsencode(folder), os.fsencode(folder), None, MS_BIND, None), f"bind-mount {folder}")
        set_read_only("/", True, recursive=True)
        set_read_only(folder, False, recursive=False)
        set_read_only("/proc", False, recursive=False)
        if os.path.isdir("/dev/shm"):  # multiprocessing's locks live there: a private one, gone with the namespace
            check(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"size=16m,mode=1777"),
                  "mount /dev/shm")
    check(libc.unshare(CLONE_NEWUSER), "create a nested user namespace")
    for name, line in (("setgroups", "deny"), ("uid_map", f"{INSIDE_ID} 0 1"), ("gid_map", f"{INSIDE_ID} 0 1")):
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(line)
        except OSError as e:
            fail(f"write /proc/self/{name}", e.errno or 0)
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    try:
        os.chdir(folder)
        os.execv(interpreter, [interpreter, "-I", script])
    except OSError as e:
        fail(f"run {interpreter}", e.errno or 0)


if __name__ == "__main__":  # true under `python -c`
    main(*sys.argv[1:5])
