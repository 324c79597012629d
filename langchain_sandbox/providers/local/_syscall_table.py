"""The local sandbox's system call policy as data: which calls are allowed, which refused, and why.

This table is the single source of the seccomp filter: ``_seccomp.py`` builds the BPF program from
it, and the table in ``docs/isolation.md`` is generated from it (``python -m
langchain_sandbox.providers.local._syscall_docs``; a test compares the two). It is an
**allow-list**: a call named in no allowed group answers ``EPERM``. The groups are named, so a
group can be looked up (and, in a test, left out) by its name.

Names are those of the native 64-bit ABIs (x86_64, aarch64); a name a machine's ABI does not have
(``open`` on aarch64, ``arch_prctl`` off x86) is simply absent there. 32-bit and x32 calls are not
listed: the filter kills a process that makes a call of another ABI.

The comparison with Docker's default profile (moby 20.10.24, ``tests/security/``) is data too:
`ALLOWED_HERE_NOT_BY_DOCKER` names every call this table allows and Docker refuses (or allows
only with a capability), with the reason; `REFUSED_HERE_ALLOWED_BY_DOCKER` every call Docker
allows that is refused here. A test fails on any difference the two do not name.
"""

from __future__ import annotations

import errno
import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class SyscallGroup:
    """Calls that share one verdict and one reason.

    Attributes:
        name: Key of the group (stable; what a test would name to leave the group out).
        calls: The system calls, by libseccomp name.
        errno: ``None`` if the calls are allowed, otherwise the errno they answer.
        why: Why they are allowed or refused (rendered in the docs).
    """

    name: str
    calls: tuple[str, ...]
    errno: int | None
    why: str


@dataclass(frozen=True)
class ArgumentRule:
    """One rule of a call checked by its arguments.

    Attributes:
        errno: ``None`` to allow the call when every condition holds, otherwise the errno it answers.
        conditions: ``(argument index, mask, value)`` triples, each holding when
            ``argument & mask == value``; all must hold.
    """

    errno: int | None
    conditions: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class CheckedCall:
    """A call allowed only with some arguments; argument values no rule matches answer ``EPERM``.

    Attributes:
        name: Key of the check.
        calls: The calls the rules apply to (same arguments).
        rules: The rules, whose conditions never overlap.
        allowed_when: When the call is allowed, for the docs.
        docker: What Docker's default profile does with the call, for the docs.
        why: The reason, for the docs.
    """

    name: str
    calls: tuple[str, ...]
    rules: tuple[ArgumentRule, ...]
    allowed_when: str
    docker: str
    why: str


# What a call no rule allows answers (Docker's default too): the answer an unprivileged caller gets.
DEFAULT_ERRNO = errno.EPERM
_INT = 0xFFFFFFFF  # the kernel reads an ``int``/``unsigned int`` argument's low 32 bits only


def masked_complement(values: tuple[int, ...], bits: int = 32) -> tuple[tuple[int, int], ...]:
    """``(mask, value)`` pairs matching exactly the ``bits``-bit numbers that are not in ``values``.

    libseccomp has no "none of" comparison and allows one comparison per argument in a rule, so
    "any other value" is spelled as disjoint masked equalities: walk the binary prefix tree of
    ``values`` from the top bit and, wherever a branch leads to no value, match that prefix
    (at most ``bits`` pairs per value).
    """
    full = (1 << bits) - 1
    pairs: list[tuple[int, int]] = []
    prefixes = {0}
    for depth in range(bits):
        bit = 1 << (bits - depth - 1)
        mask = full & ~(bit - 1)
        taken = {value & mask for value in values}
        for prefix in sorted(prefixes):
            pairs += [(mask, branch) for branch in (prefix, prefix | bit) if branch not in taken]
        prefixes = taken
    return tuple(pairs)


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# ``clone``'s flags: the first argument, except on s390 where it is the second.
_CLONE_FLAGS_ARG = 1 if platform.machine().startswith("s390") else 0
_NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
# Docker's personality values: PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32, the query.
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
TERMINAL_IOCTLS = (
    0x5412,  # TIOCSTI: push characters into a terminal's input
    0x541C,  # TIOCLINUX: the same through the Linux console
)
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE = 0
SOCKET_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)

ALLOWED: tuple[SyscallGroup, ...] = (
    SyscallGroup(
        "files",
        _names(
            "access chdir chmod chown close close_range copy_file_range creat dup dup2 dup3 "
            "faccessat faccessat2 fadvise64 fallocate fchdir fchmod fchmodat fchown fchownat "
            "fcntl fdatasync fgetxattr flistxattr flock fremovexattr fsetxattr fstat fstatfs "
            "fsync ftruncate futimesat getcwd getdents getdents64 getxattr lchown lgetxattr "
            "link linkat listxattr llistxattr lremovexattr lseek lsetxattr lstat mkdir "
            "mkdirat mknod mknodat newfstatat open openat openat2 pipe pipe2 pread64 preadv "
            "preadv2 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv "
            "removexattr rename renameat renameat2 rmdir sendfile setxattr splice stat statfs "
            "statx symlink symlinkat sync sync_file_range syncfs tee truncate umask unlink "
            "unlinkat utime utimensat utimes vmsplice write writev"
        ),
        None,
        "files, directories and pipes; the mounts decide what they can reach",
    ),
    SyscallGroup(
        "waiting",
        _names(
            "epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 "
            "epoll_wait epoll_wait_old eventfd eventfd2 poll ppoll pselect6 select signalfd "
            "signalfd4 timerfd_create timerfd_gettime timerfd_settime io_setup io_submit "
            "io_getevents io_pgetevents io_cancel io_destroy futex futex_waitv"
        ),
        None,
        "event loops, threads and asynchronous I/O (the old `io_*` AIO, not `io_uring`)",
    ),
    SyscallGroup(
        "processes",
        _names(
            "execve execveat exit exit_group fork vfork wait4 waitid kill tkill tgkill getpid "
            "getppid gettid getpgid getpgrp getsid setpgid setsid set_tid_address "
            "set_robust_list get_robust_list rseq prctl arch_prctl prlimit64 getrlimit "
            "setrlimit getrusage getpriority setpriority ioprio_get ioprio_set "
            "sched_getaffinity sched_setaffinity sched_getattr sched_setattr sched_getparam "
            "sched_setparam sched_getscheduler sched_setscheduler sched_get_priority_max "
            "sched_get_priority_min sched_rr_get_interval sched_yield capget capset "
            "pidfd_open pidfd_send_signal membarrier restart_syscall pause uname sysinfo "
            "times getcpu"
        ),
        None,
        "starting, waiting for and scheduling the session's own processes (the pid namespace "
        "holds only them; the cgroup bounds their number)",
    ),
    SyscallGroup(
        "randomness",
        ("getrandom",),
        None,
        "the kernel's random numbers (`os.urandom`, `secrets`, hash seeds)",
    ),
    SyscallGroup(
        "sandboxing",
        ("seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"),
        None,
        "a process may restrict itself further (a filter it adds can only refuse more)",
    ),
    SyscallGroup(
        "memory",
        _names(
            "brk mmap munmap mremap mprotect madvise mincore mlock mlock2 mlockall munlock "
            "munlockall msync remap_file_pages memfd_create process_mrelease get_thread_area "
            "set_thread_area"
        ),
        None,
        "the process's own memory (the memory cgroup bounds it)",
    ),
    SyscallGroup(
        "signals and timers",
        _names(
            "rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn "
            "rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo sigaltstack alarm getitimer "
            "setitimer timer_create timer_delete timer_getoverrun timer_gettime timer_settime "
            "clock_getres clock_gettime clock_nanosleep nanosleep gettimeofday time adjtimex"
        ),
        None,
        "signals, timers and reading the clocks (`adjtimex` changes nothing without "
        "`CAP_SYS_TIME`)",
    ),
    SyscallGroup(
        "identity",
        _names(
            "getuid geteuid getgid getegid getgroups getresuid getresgid setuid setgid "
            "setreuid setregid setresuid setresgid setgroups setfsuid setfsgid"
        ),
        None,
        "without capabilities a process can only give up ids it has",
    ),
    SyscallGroup(
        "sockets",
        _names(
            "accept accept4 bind connect listen getpeername getsockname getsockopt setsockopt "
            "recvfrom recvmsg recvmmsg sendto sendmsg sendmmsg shutdown"
        ),
        None,
        "using a socket; which sockets can be made is checked (`socket`, `socketpair` below)",
    ),
    SyscallGroup(
        "ipc",
        _names(
            "msgctl msgget msgrcv msgsnd semctl semget semop semtimedop shmat shmctl shmdt "
            "shmget mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend mq_unlink"
        ),
        None,
        "System V and POSIX IPC, in the session's own IPC namespace (`multiprocessing` uses "
        "semaphores)",
    ),
)

CHECKED: tuple[CheckedCall, ...] = (
    CheckedCall(
        "clone",
        ("clone",),
        (ArgumentRule(None, ((_CLONE_FLAGS_ARG, _NAMESPACE_FLAGS, 0),)),),
        "no namespace flag (`CLONE_NEWUSER`, `NEWNS`, `NEWPID`, `NEWNET`, `NEWIPC`, `NEWUTS`, "
        "`NEWCGROUP`); `EPERM` otherwise",
        "the same check",
        "threads and processes, never a new namespace (as Docker)",
    ),
    CheckedCall(
        "personality",
        ("personality",),
        tuple(ArgumentRule(None, ((0, _INT, value),)) for value in PERSONALITIES),
        "the values Docker allows (`PER_LINUX`, `PER_LINUX32`, `UNAME26`, both, the query "
        "`0xffffffff`); `EPERM` for the rest, which holds the flags that weaken the memory layout "
        "(`ADDR_NO_RANDOMIZE`, `READ_IMPLIES_EXEC`...)",
        "the same values",
        "no switching off address-space randomization",
    ),
    CheckedCall(
        "socket",
        ("socket", "socketpair"),
        (
            *(ArgumentRule(None, ((0, _INT, family),)) for family in SOCKET_FAMILIES),
            ArgumentRule(None, ((0, _INT, AF_NETLINK), (2, _INT, NETLINK_ROUTE))),
            *(
                ArgumentRule(errno.EPROTONOSUPPORT, ((0, _INT, AF_NETLINK), (2, mask, value)))
                for mask, value in masked_complement((NETLINK_ROUTE,))
            ),
            *(
                ArgumentRule(errno.EAFNOSUPPORT, ((0, mask, value),))
                for mask, value in masked_complement((*SOCKET_FAMILIES, AF_NETLINK))
            ),
        ),
        "`AF_UNIX`, `AF_INET`, `AF_INET6`, and `AF_NETLINK` with `NETLINK_ROUTE` (interface "
        "addresses, for `getaddrinfo`); any other netlink protocol answers `EPROTONOSUPPORT`, any "
        "other family (`AF_VSOCK`, `AF_PACKET`, `AF_ALG`, `AF_BLUETOOTH`, `AF_XDP`...) "
        "`EAFNOSUPPORT`",
        "allows every family",
        "`--unshare-net` does not cover families that are not namespaced: vsock reaches the "
        "hypervisor, packet and XDP sockets raw devices, `AF_ALG` the kernel's crypto code",
    ),
    CheckedCall(
        "ioctl",
        ("ioctl",),
        (
            *(ArgumentRule(errno.EPERM, ((1, _INT, request),)) for request in TERMINAL_IOCTLS),
            *(
                ArgumentRule(None, ((1, mask, value),))
                for mask, value in masked_complement(TERMINAL_IOCTLS)
            ),
        ),
        "any request but `TIOCSTI` and `TIOCLINUX` (`EPERM`)",
        "allows every request",
        "no typing into a terminal another process reads",
    ),
)

REFUSED: tuple[SyscallGroup, ...] = (
    SyscallGroup(
        "namespaces and mounts",
        _names("unshare setns mount umount2 pivot_root chroot statmount listmount"),
        errno.EPERM,
        "the sandbox's file system and limits stay as set up (no cgroupfs mount to rewrite them); "
        "no listing of mounts by id",
    ),
    SyscallGroup(
        "other processes",
        _names(
            "ptrace process_vm_readv process_vm_writev process_madvise pidfd_getfd kcmp "
            "move_pages migrate_pages"
        ),
        errno.EPERM,
        "no reading or steering another process's memory or descriptors",
    ),
    SyscallGroup(
        "kernel extension and observation",
        _names(
            "bpf perf_event_open userfaultfd init_module finit_module delete_module "
            "create_module kexec_load kexec_file_load fanotify_init fanotify_mark"
        ),
        errno.EPERM,
        "large kernel attack surface; fanotify watches whole mounts that other sessions share",
    ),
    SyscallGroup(
        "host-wide state",
        _names(
            "reboot swapon swapoff acct quotactl quotactl_fd settimeofday clock_settime "
            "clock_adjtime syslog iopl ioperm modify_ldt vhangup lookup_dcookie nfsservctl "
            "uselib sethostname setdomainname"
        ),
        errno.EPERM,
        "the machine's clocks, swap, console and hardware; `modify_ldt` is old x86 attack "
        "surface nothing here needs",
    ),
    SyscallGroup(
        "file handles",
        ("open_by_handle_at", "name_to_handle_at"),
        errno.EPERM,
        'opening a file by handle bypasses the mount namespace ("shocker")',
    ),
    SyscallGroup(
        "new clone and mount API",
        _names("clone3 fsopen fsconfig fsmount fspick move_mount open_tree mount_setattr"),
        errno.ENOSYS,
        "glibc falls back from `clone3` to `clone` (checked above), libmount from the new API "
        "to `mount`, only on `ENOSYS`",
    ),
    SyscallGroup(
        "io_uring",
        ("io_uring_setup", "io_uring_enter", "io_uring_register"),
        errno.ENOSYS,
        "a second system call interface the filter cannot see into; libuv and liburing fall "
        "back to plain I/O on `ENOSYS`",
    ),
    SyscallGroup(
        "kernel keyring",
        ("keyctl", "add_key", "request_key"),
        errno.ENOSYS,
        "the keyring is not namespaced (the host user's keys); Kerberos and systemd fall back "
        "to their file caches on `ENOSYS`",
    ),
    SyscallGroup(
        "inotify",
        ("inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch"),
        errno.ENOSYS,
        "a watch on a shared read-only file (the interpreter, `/usr`) sees other sessions open "
        "it, a channel between sessions; a kernel without inotify answers `ENOSYS`, and `tail -f` "
        "and watchers fall back to polling",
    ),
    SyscallGroup(
        "NUMA memory policy",
        ("get_mempolicy", "set_mempolicy", "mbind", "set_mempolicy_home_node"),
        errno.ENOSYS,
        "placing memory on the host's NUMA nodes (Docker: `CAP_SYS_NICE` only); libnuma and "
        "hwloc treat `ENOSYS` as a machine without NUMA",
    ),
    SyscallGroup(
        "secret memory",
        ("memfd_secret",),
        errno.ENOSYS,
        "memory hidden from the kernel itself, off by default in most kernels (which answer "
        "`ENOSYS`): nothing here needs it",
    ),
    SyscallGroup(
        "calls newer than the table",
        ("fchmodat2", "map_shadow_stack", "cachestat", "futex_wake", "futex_wait", "futex_requeue"),
        errno.ENOSYS,
        "answered as a kernel that predates them would, so glibc (`fchmodat2`, shadow stacks) "
        "takes its fallback; any call this table does not name answers `EPERM`",
    ),
)

# Calls allowed here that Docker's default profile refuses or allows only with a capability.
ALLOWED_HERE_NOT_BY_DOCKER: dict[str, str] = {}

# Calls Docker's default profile allows unconditionally that this table refuses (reasons: the
# groups of REFUSED above).
REFUSED_HERE_ALLOWED_BY_DOCKER = frozenset(
    {
        "clock_adjtime",
        "fanotify_mark",
        "inotify_add_watch",
        "inotify_init",
        "inotify_init1",
        "inotify_rm_watch",
        "io_uring_enter",
        "io_uring_register",
        "io_uring_setup",
        "memfd_secret",
        "modify_ldt",
        "ptrace",
    }
)

__all__ = [
    "ALLOWED",
    "ALLOWED_HERE_NOT_BY_DOCKER",
    "CHECKED",
    "DEFAULT_ERRNO",
    "PERSONALITIES",
    "REFUSED",
    "REFUSED_HERE_ALLOWED_BY_DOCKER",
    "ArgumentRule",
    "CheckedCall",
    "SyscallGroup",
    "masked_complement",
]
