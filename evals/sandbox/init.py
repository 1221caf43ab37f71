"""The program's first process: in the namespaces, build the program's file system, drop every
privilege, and run it.

Started by `unshare` (network, mount, PID and IPC namespaces, and a user namespace for a caller
that is not root), as root there, in the interpreter the program will use, with `-I -S` and no
program code loaded. Its one argument is a JSON object: the isolation ('full' or 'none'), the
program's directory, the channel's descriptors, the limits, the entry point and, for 'full', the
directories to show read-only beside the system's, the cgroup files to join and the uid and gid to
drop to (null for a caller that is not root: it stays the user namespace's root, with no
capability).

It mounts a tmpfs in the program's directory as the program's root: the system's directories and
the interpreter's prefix bound read-only, /dev with five harmless devices, a /proc of the PID
namespace, private tmpfs mounts for /tmp, /dev/shm and the program's own directory (where
program.py is copied), then the root itself made read-only. Nothing else of the host is there: no
home, repository, virtual environment, results/, /sys, /run or /etc. Then it forks: the child
chroots there (a chrooted process may not make a user namespace of its own, in which it could
mount what it likes), drops every privilege (supplementary groups, uid and gid for a root caller;
the capability bounding, ambient, inheritable, permitted and effective sets; no_new_privs),
checks in /proc/self/status that none is left, and becomes the program (child.py). This process
stays as the namespace's init: it reaps orphans, exits with the program's status (128 + N for a
signal N), and when it exits the kernel kills every process left in the namespace.

The drop is done here rather than by util-linux's setpriv because the program then needs no
interpreter of its own: one interpreter start per program instead of two, which halves the
sandbox's cost per program (benchmarks/sandbox.py).
"""

import ctypes
import json
import os
import sys

from evals.sandbox.child import serve_program

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs's flags that a remount must keep (a user namespace may not clear them), as mount flags.
KEPT = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC, os.ST_NOATIME: MS_NOATIME,
        os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}
TMPFS = "size=32m,nr_inodes=8192"
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
DEVICES = ("null", "zero", "full", "random", "urandom")
SHM_BYTES = 32 * 2**20
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)


def checked(result, what):
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def mount(source, target, fstype, flags, data=None):
    encode = lambda text: text and text.encode()  # noqa: E731
    checked(libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def tmpfs(target, mode, extra=""):
    mount("sandbox", target, "tmpfs", MS_NOSUID | MS_NODEV, f"{TMPFS},mode={mode:o}{extra}")


def read_only(target, source):
    mount(source, target, None, MS_BIND)
    kept = os.statvfs(target).f_flag
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    mount(None, target, None, flags | sum(bit for flag, bit in KEPT.items() if kept & flag))


def write(path, text):
    with open(path, "w") as file:
        file.write(text)


def build(workdir, shown, owner):
    """The program's root, in workdir/root, with program.py in its own directory."""
    root = os.path.join(workdir, "root")
    os.mkdir(root)
    tmpfs(root, 0o755)
    for directory in SYSTEM + tuple(shown):
        inside = root + directory
        if os.path.islink(directory):
            os.symlink(os.readlink(directory), inside)
        elif os.path.isdir(directory):
            os.makedirs(inside)
            read_only(inside, directory)
    for directory in ("dev", "dev/shm", "proc", "tmp"):
        os.mkdir(os.path.join(root, directory))
    for device in DEVICES:
        inside = f"{root}/dev/{device}"
        open(inside, "w").close()
        mount(f"/dev/{device}", inside, None, MS_BIND)
    os.symlink("/proc/self/fd", f"{root}/dev/fd")
    tmpfs(f"{root}/dev/shm", 0o1777)
    tmpfs(f"{root}/tmp", 0o1777)
    mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    home = root + workdir
    os.makedirs(home)
    tmpfs(home, 0o700, f",uid={owner[0]},gid={owner[1]}" if owner[0] is not None else "")
    with open(os.path.join(workdir, "program.py"), "rb") as source, open(f"{home}/program.py", "wb") as copy:
        copy.write(source.read())
    mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return root


class CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapabilitySets(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop(uid, gid):
    """Leave no privilege: as `uid`/`gid` (None: stay the user namespace's root), no capability in any
    set, no_new_privs; checked in /proc/self/status, and an exception where anything is left."""
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for capability in range(int(last.read()) + 1):
            checked(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "dropping the capability bounding set")
    checked(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing the ambient capabilities")
    if uid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    checked(libc.capset(ctypes.byref(CapabilityHeader(CAPABILITY_VERSION_3, 0)), (CapabilitySets * 2)()),
            "clearing the capabilities")
    checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs")
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status.read().splitlines() if ":" in line)
    left = [key for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb") if int(fields[key], 16)]
    left += [] if fields["NoNewPrivs"].strip() == "1" else ["no_new_privs unset"]
    if uid is not None:
        left += [key for key in ("Uid", "Gid") if set(fields[key].split()) != {str(uid if key == "Uid" else gid)}]
        left += ["supplementary groups"] if fields["Groups"].strip() else []
    if left:
        raise PermissionError(f"privileges left after the drop: {', '.join(left)}")


def start(spec):
    workdir = spec["workdir"]
    if spec["isolation"] == "full":
        for procs in spec["cgroups"]:
            write(procs, "0")
        # The IPC namespace is the program's own: these bound its System V shared memory and queues.
        write("/proc/sys/kernel/shmmax", str(SHM_BYTES))
        write("/proc/sys/kernel/shmall", str(SHM_BYTES // 4096))
        write("/proc/sys/kernel/shmmni", "16")
        write("/proc/sys/fs/mqueue/queues_max", "0")
        root = build(workdir, spec["shown"], (spec["uid"], spec["gid"]))
        pid = os.fork()
        if pid:
            os.close(spec["request_fd"])
            os.close(spec["reply_fd"])
            while True:  # the namespace's init: reap every orphan until the program itself ends
                reaped, status = os.wait()
                if reaped == pid:
                    code = os.waitstatus_to_exitcode(status)
                    sys.exit(128 - code if code < 0 else code)
        os.chroot(root)
        drop(spec["uid"], spec["gid"])
    os.chdir(workdir)
    serve_program(os.path.join(workdir, "program.py"), spec["request_fd"], spec["reply_fd"], spec["limits"],
                  spec["entry_point"])


start(json.loads(sys.argv[1]))
