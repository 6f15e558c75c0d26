"""The sandbox's seccomp profile: Docker's current default one (no io_uring) plus denials of the btrfs
administration ioctls.

Without them a process in the container creates a subvolume in its workspace or its own file system
(`BTRFS_IOC_SUBVOL_CREATE` needs no capability): what it writes there is outside the run's qgroup, so
the disk quota (sandboxes/quota.py) no longer holds, and a nested subvolume marked read-only outlives
the run. Docker's own profile is passed whole: a profile given to the engine replaces the default one.

The allow list is Docker's default (moby's profiles/seccomp/default.json, 2024), read by the engine's
own parser: names that engine's libseccomp does not know are skipped by it, as for its built-in profile.
The engine's libseccomp lets an unconditional allow win over a conditional denial of the same
system call, so `ioctl` is not in the allow list: it is allowed by conditions on its request (argument
1) that together cover every request but the denied ones. Each condition is one masked comparison of
the low 32 bits (the kernel reads `cmd` as an unsigned int: high bits set reach the same handler), and
the engine ORs conditions on the same argument: a request whose type byte is not btrfs's 0x94 (one rule
a bit of that byte), or whose type is 0x94 and whose number is in a block of numbers none of which is
denied (the denial is by number, whatever the direction and size bits). The other btrfs requests
(FICLONE for `cp --reflink`, the read-only queries) stay allowed.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson

EPERM = 1
BTRFS_IOCTLS = {
    "BTRFS_IOC_SNAP_CREATE": 0x50009401,
    "BTRFS_IOC_SUBVOL_CREATE": 0x5000940E,
    "BTRFS_IOC_SNAP_DESTROY": 0x5000940F,
    "BTRFS_IOC_DEFAULT_SUBVOL": 0x40089413,
    "BTRFS_IOC_SNAP_CREATE_V2": 0x50009417,
    "BTRFS_IOC_SUBVOL_CREATE_V2": 0x50009418,
    "BTRFS_IOC_SUBVOL_SETFLAGS": 0x4008941A,
    "BTRFS_IOC_SET_RECEIVED_SUBVOL": 0xC0C89425,
    "BTRFS_IOC_QUOTA_CTL": 0xC0109428,
    "BTRFS_IOC_QGROUP_ASSIGN": 0x40189429,
    "BTRFS_IOC_QGROUP_CREATE": 0x4010942A,
    "BTRFS_IOC_QGROUP_LIMIT": 0x8030942B,
    "BTRFS_IOC_QUOTA_RESCAN": 0x4040942C,
    "BTRFS_IOC_SNAP_DESTROY_V2": 0x5000943F,
}
"""Create, snapshot, delete or flag (read-only) a subvolume, change the default one, change quotas or
qgroups (the values of linux/btrfs.h on every architecture Docker runs on)."""

_ALLOWED = """
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32 clock_adjtime
clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64 clock_nanosleep
clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2 dup3 epoll_create
epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2
execve execveat exit exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark
fchdir fchmod fchmodat fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock fork
fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex
futex_time64 futex_waitv futimesat getcpu getcwd getdents getdents64 getegid getegid32 geteuid geteuid32
getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp getpid getppid getpriority
getrandom getresgid getresgid32 getresuid getresuid32 getrlimit get_robust_list getrusage getsid
getsockname getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr inotify_add_watch
inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents io_pgetevents
io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit ipc kill landlock_add_rule
landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr link linkat listen listxattr
llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 madvise membarrier memfd_create
memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr
mq_notify mq_open mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink
mremap msgctl msgget msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat
_newselect open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free
pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6
pselect6_time64 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv recvfrom recvmmsg
recvmmsg_time64 recvmsg remap_file_pages removexattr rename renameat renameat2 restart_syscall rmdir rseq
rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait
rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam
sched_get_priority_max sched_get_priority_min sched_getscheduler sched_rr_get_interval
sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam sched_setscheduler
sched_yield seccomp select semctl semget semop semtimedop semtimedop_time64 send sendfile sendfile64
sendmmsg sendmsg sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32
setitimer setpgid setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setuid32
setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 sigprocmask sigreturn
socketcall socketpair splice stat stat64 statfs statfs64 statx symlink symlinkat sync sync_file_range
syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_gettime64
timer_settime timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime
timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat utime utimensat
utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev
process_vm_readv process_vm_writev ptrace
"""
"""Allowed whatever the arguments (ptrace and process_vm_*: the default allows them on kernels >= 4.8).
Not `io_uring_setup`, `io_uring_enter` and `io_uring_register`: moby removed them from its default profile in
2023 (a kernel attack surface no agent tool needs); they fall to the default action, EPERM."""

_BY_ARCH = {
    "sync_file_range2 swapcontext": ["ppc64le"],
    "arm_fadvise64_64 arm_sync_file_range sync_file_range2 breakpoint cacheflush set_tls": ["arm", "arm64"],
    "arch_prctl": ["amd64", "x32"],
    "modify_ldt": ["amd64", "x32", "x86"],
    "s390_pci_mmio_read s390_pci_mmio_write s390_runtime_instr": ["s390", "s390x"],
    "riscv_flush_icache": ["riscv64"],
}
_BY_CAP = {
    "open_by_handle_at": "CAP_DAC_READ_SEARCH",
    "bpf clone clone3 fanotify_init fsconfig fsmount fsopen fspick lookup_dcookie mount mount_setattr "
    "move_mount open_tree perf_event_open quotactl quotactl_fd setdomainname sethostname setns syslog "
    "umount umount2 unshare": "CAP_SYS_ADMIN",
    "reboot": "CAP_SYS_BOOT",
    "chroot": "CAP_SYS_CHROOT",
    "delete_module init_module finit_module": "CAP_SYS_MODULE",
    "acct": "CAP_SYS_PACCT",
    "kcmp pidfd_getfd process_madvise process_vm_readv process_vm_writev ptrace": "CAP_SYS_PTRACE",
    "iopl ioperm": "CAP_SYS_RAWIO",
    "settimeofday stime clock_settime clock_settime64": "CAP_SYS_TIME",
    "vhangup": "CAP_SYS_TTY_CONFIG",
    "get_mempolicy mbind set_mempolicy set_mempolicy_home_node": "CAP_SYS_NICE",
    "syslog": "CAP_SYSLOG",
    "bpf": "CAP_BPF",
    "perf_event_open": "CAP_PERFMON",
}
_ARCHES = {
    "SCMP_ARCH_X86_64": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    "SCMP_ARCH_AARCH64": ["SCMP_ARCH_ARM"],
    "SCMP_ARCH_MIPS64": ["SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64N32"],
    "SCMP_ARCH_MIPS64N32": ["SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64"],
    "SCMP_ARCH_MIPSEL64": ["SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64N32"],
    "SCMP_ARCH_MIPSEL64N32": ["SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64"],
    "SCMP_ARCH_S390X": ["SCMP_ARCH_S390"],
    "SCMP_ARCH_RISCV64": [],
}
_CLONE_NS_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET: clone without CAP_SYS_ADMIN
may set none of them."""


def _allow(names: str, **rule: object) -> dict[str, object]:
    return {"names": names.split(), "action": "SCMP_ACT_ALLOW", **rule}


def _arg(index: int, value: int, op: str, value_two: int | None = None) -> dict[str, object]:
    arg: dict[str, object] = {"index": index, "value": value, "op": op}
    if value_two is not None:
        arg["valueTwo"] = value_two
    return arg


_BTRFS_TYPE = 0x94


def _blocks(denied: set[int], prefix: int = 0, bits: int = 8) -> list[tuple[int, int]]:
    """(mask, value) blocks of the 8-bit numbers that together cover all but `denied`: the number
    range `prefix` (its top 8 - `bits` bits) is one block when it holds no denied number, else halved."""
    size = 1 << bits
    inside = {n for n in denied if prefix <= n < prefix + size}
    if not inside:
        return [(0xFF & ~(size - 1), prefix)]
    if bits == 0:
        return []
    half = size >> 1
    return _blocks(inside, prefix, bits - 1) + _blocks(inside, prefix + half, bits - 1)


def _ioctl_rules() -> list[dict[str, object]]:
    """`ioctl` allowed for every request but BTRFS_IOCTLS (their numbers under btrfs's type byte)."""
    assert all((r >> 8) & 0xFF == _BTRFS_TYPE for r in BTRFS_IOCTLS.values())
    other_type = [((1 << bit), (~_BTRFS_TYPE << 8) & (1 << bit)) for bit in range(8, 16)]
    numbers = {r & 0xFF for r in BTRFS_IOCTLS.values()}
    btrfs_allowed = [(0xFF00 | mask, _BTRFS_TYPE << 8 | value) for mask, value in _blocks(numbers)]
    return [
        _allow("ioctl", args=[_arg(1, mask, "SCMP_CMP_MASKED_EQ", value)])
        for mask, value in other_type + btrfs_allowed
    ]


@functools.cache
def profile() -> dict[str, Any]:
    """The profile, as the engine's `seccomp=` security option reads it."""
    rules = [_allow(_ALLOWED), _allow("socket", args=[_arg(0, 40, "SCMP_CMP_NE")])]  # no AF_VSOCK
    rules += [
        _allow("personality", args=[_arg(0, v, "SCMP_CMP_EQ")])
        for v in (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
    ]
    rules += [_allow(names, includes={"arches": arches}) for names, arches in _BY_ARCH.items()]
    rules += [_allow(names, includes={"caps": [cap]}) for names, cap in _BY_CAP.items()]
    no_admin = {"caps": ["CAP_SYS_ADMIN"]}
    rules += [
        _allow(
            "clone",
            args=[_arg(0, _CLONE_NS_FLAGS, "SCMP_CMP_MASKED_EQ")],
            excludes={**no_admin, "arches": ["s390", "s390x"]},
        ),
        _allow(
            "clone",
            args=[_arg(1, _CLONE_NS_FLAGS, "SCMP_CMP_MASKED_EQ")],
            includes={"arches": ["s390", "s390x"]},
            excludes=no_admin,
        ),
        # clone3's flags are in memory seccomp cannot read: ENOSYS, and the C library falls back to clone
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38, "excludes": no_admin},
    ]
    rules += _ioctl_rules()
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [{"architecture": a, "subArchitectures": subs} for a, subs in _ARCHES.items()],
        "syscalls": rules,
    }


def security_opt() -> str:
    """The `seccomp=` security option of every sandbox container."""
    return "seccomp=" + orjson.dumps(profile()).decode()
