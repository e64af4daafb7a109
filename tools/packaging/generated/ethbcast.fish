# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_ethbcast_global_optspecs
    string join \n v/verbose h/help V/version
end

function __fish_ethbcast_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_ethbcast_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_ethbcast_using_subcommand
    set -l cmd (__fish_ethbcast_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c ethbcast -n "__fish_ethbcast_needs_command" -s v -l verbose -d 'Log more on stderr: -v information, -vv debug events (default: warnings and errors; RUST_LOG takes precedence)'
complete -c ethbcast -n "__fish_ethbcast_needs_command" -s h -l help -d 'Print help'
complete -c ethbcast -n "__fish_ethbcast_needs_command" -s V -l version -d 'Print version'
complete -c ethbcast -n "__fish_ethbcast_needs_command" -f -a "send" -d 'Send a file or a directory (-i) or standard input to the receivers'
complete -c ethbcast -n "__fish_ethbcast_needs_command" -f -a "recv" -d 'Receive one transfer: to stdout (default), a file (-o), a command\'s stdin (-O), or a directory (-x, a tree)'
complete -c ethbcast -n "__fish_ethbcast_needs_command" -f -a "doctor" -d 'Check this host before a transfer: the interface (exists, up, Ethernet, MTU), the capabilities, net.core.rmem_max, ETHBCAST_BACKEND, and opening the link; with --hostfile, every host of the file too (run `ethbcast doctor --listen` on those). One line per check with its fix; exit 1 if any check fails'
complete -c ethbcast -n "__fish_ethbcast_needs_command" -f -a "keygen" -d 'Write a fresh random group key to FILE (mode 0600; an existing file is not overwritten), to copy to every host and pass as --key-file'
complete -c ethbcast -n "__fish_ethbcast_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l iface -d 'Network interface (all hosts on one Ethernet segment)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l group-id -d 'Group id: transfers with different ids on one segment ignore each other' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l backend -d 'Link backend: ring (mmap rings), socket, pnet or xdp (AF_XDP)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l wait-mode -d 'How to wait for frames: adaptive (spin briefly, then block), patient (spin up to 2 ms, then block), block, spin, or doze (check every millisecond and take what arrived as one batch). Default: adaptive on the sender, doze on receivers, where a wake-up or a yield per frame costs more than the frame itself when hosts have more busy processes than cores' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l window -d 'Retransmission buffer slots = frames in flight (both sides must agree)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l ack-every -d 'A receiver acknowledges every this many frames (and at message ends and after a short delay): fewer acknowledgements cost the sender and the switch less per data frame' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l nack-gather -d 'On a receiver: gather the gaps found in this many frames into one request for repair (at most half the window; 0: ask at once). Default: a quarter of the window, so that under steady loss a receiver sends one request for several lost frames' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l key-file -d 'Group key file, the same on every host, readable by its owner only (`ethbcast keygen FILE` writes one): the join and every frame of the transfer are authenticated, so a host without the key can neither join, inject data, abort, evict nor report. Required unless --insecure' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l group-address -d 'Where broadcasts go: derived (the group\'s own multicast address, 03:eb: and the group id, so hosts outside the transfer never see its frames), broadcast (every host of the segment; for switches or NICs that mishandle multicast), or a multicast MAC' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -s i -l input -d 'Input file (default: standard input, read until EOF), or a directory: sent as a tree (a tar stream packed as it is sent: regular files, directories, symbolic links as links, permission bits and times; not owners, sockets, named pipes or devices; hard links as separate files), for `recv --extract DIR` (or `-O \'tar -x\'`)' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l receivers -d 'Wait for this many receivers' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l hostfile -d 'Wait for exactly the hosts of this file (one MAC per line, optionally with the host\'s name, which the report shows; `#` comments)' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l only-failed -d 'Wait for exactly the receivers that a previous `send --json` report (this file) lists as not completed or not joined, and send to them alone' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l min-receivers -d 'Start without some receivers: once at least this many have joined and --max-wait has passed; the report names those that did not join (exit 1 then)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l max-wait -d 'With --min-receivers: how long to wait for all receivers (e.g. 2s, 30)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l max-rate -d 'Sender-side token bucket: 500mbit, 1gbit, 50MB/s, 20MiB/s. Default: paced only by the shared buffer (at most --window frames unacknowledged)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l digest -d 'End-to-end digest every receiver checks: xxh3 (XXH3-128, fast) or blake3 (cryptographic, about 6% slower on a busy 8-receiver host)' -r -f -a "xxh3\t'XXH3, 128 bits (the default)'
blake3\t'BLAKE3, 256 bits'"
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l chunk -d 'Bytes per broadcast message (e.g. 1M, 256KiB, 1MB; K, M are binary, KB, MB decimal)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l wait -d 'Seconds to wait for the receivers to join (exit 3 if they don\'t), e.g. 60, 2.5, 500ms, 2m; inf: no limit' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l timeout -d 'Evict a receiver whose cursor has not moved and that was silent this many seconds while it had data outstanding, and fail one that acknowledged all data but showed no progress towards its report (its output taking data) for as long; inf: never' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l report-wait -d 'Seconds to wait for completion reports once all data is acknowledged (an -O command may need time to finish); inf: no limit' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l status-file -d 'Write the transfer\'s state and counters as JSON to this file every second and at the end (each time whole: a temporary file renamed over it), for monitoring' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l no-peer-repair -d 'On a receiver: ask only the sender for lost frames. By default a receiver asks a fellow receiver first (peer repair), which keeps repairs off the sender\'s link. No effect on the sender'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l no-encrypt -d 'With a key, authenticate frames without encrypting them: the data then crosses the segment in the clear. By default every frame of a keyed transfer is encrypted (AES-256-GCM); this is for measuring what that costs (docs/security.md)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l insecure -d 'Run without a group key: any host of the segment can then join, inject data, abort, and answer a receiver as its sender, whose data (and digest) the receiver takes (see docs/security.md, "Threat model"). Pin the sender with `recv --from`'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l quiet -d 'No progress bar or messages (the REPORT and warnings are still printed to stderr)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -l json -d 'Print the final report as JSON on stdout, with each receiver\'s counters (stream bytes received and kept from a partial file, bytes its output took, repairs asked of the sender and of fellow receivers, repairs served, acknowledgements, duplicates)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -s v -l verbose -d 'Log more on stderr: -v information, -vv debug events (default: warnings and errors; RUST_LOG takes precedence)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand send" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l iface -d 'Network interface (all hosts on one Ethernet segment)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l group-id -d 'Group id: transfers with different ids on one segment ignore each other' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l backend -d 'Link backend: ring (mmap rings), socket, pnet or xdp (AF_XDP)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l wait-mode -d 'How to wait for frames: adaptive (spin briefly, then block), patient (spin up to 2 ms, then block), block, spin, or doze (check every millisecond and take what arrived as one batch). Default: adaptive on the sender, doze on receivers, where a wake-up or a yield per frame costs more than the frame itself when hosts have more busy processes than cores' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l window -d 'Retransmission buffer slots = frames in flight (both sides must agree)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l ack-every -d 'A receiver acknowledges every this many frames (and at message ends and after a short delay): fewer acknowledgements cost the sender and the switch less per data frame' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l nack-gather -d 'On a receiver: gather the gaps found in this many frames into one request for repair (at most half the window; 0: ask at once). Default: a quarter of the window, so that under steady loss a receiver sends one request for several lost frames' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l key-file -d 'Group key file, the same on every host, readable by its owner only (`ethbcast keygen FILE` writes one): the join and every frame of the transfer are authenticated, so a host without the key can neither join, inject data, abort, evict nor report. Required unless --insecure' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l group-address -d 'Where broadcasts go: derived (the group\'s own multicast address, 03:eb: and the group id, so hosts outside the transfer never see its frames), broadcast (every host of the segment; for switches or NICs that mishandle multicast), or a multicast MAC' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -s o -l output -d 'Output file, written as a temporary file and renamed once the digest matched (a device or a named pipe, such as /dev/null, is written in place)' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -s O -l command -d 'Pipe the stream into `sh -c COMMAND` (its exit status counts)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -s x -l extract -d 'Unpack a tree (`send -i DIR`, or any tar stream) into the directory DIR, which must not exist or be empty: regular files, directories and symbolic links, with their permission bits (not set-user/group-ID) and times, owned by this user. It is unpacked into a fresh directory next to DIR, renamed to DIR once the digest matched, and removed if anything fails. An entry that would land outside DIR (an absolute name, `..`, a symbolic link that leads out, a hard link out, a path through a symbolic link), a device or a named pipe fails the receiver, naming the entry. A tree is always received whole (no --resume)' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l timeout -d 'Give up after this many seconds without any frame from the sender, or without the output (file, stdout, -O command) taking any data; inf: never' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l wait -d 'Seconds to wait for a sender to start (exit 3 if none does); inf: no limit' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l from -d 'Take the transfer only from the sender with this MAC (its roster alone). Without a key a MAC can be forged: this keeps out other senders by mistake, not by attack' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l user -d 'Once the link is open, run as this user (its groups too): the output file and the -O command get that user\'s rights, not root\'s. Needs root (or CAP_SETUID and CAP_SETGID)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l max-bytes -d 'Refuse a stream larger than this (e.g. 500M, 64GiB, 500MB; K, M, G, T are binary, KB, MB, GB, TB decimal): at its header when it announces its size, else as soon as its data passes the limit; the output is then discarded (exit 1). A stream is refused in any case when its data runs past the size it announced. inf: no limit' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l status-file -d 'Write this receiver\'s state and counters as JSON to this file every second and at the end (each time whole: a temporary file renamed over it), for monitoring' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l no-peer-repair -d 'On a receiver: ask only the sender for lost frames. By default a receiver asks a fellow receiver first (peer repair), which keeps repairs off the sender\'s link. No effect on the sender'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l no-encrypt -d 'With a key, authenticate frames without encrypting them: the data then crosses the segment in the clear. By default every frame of a keyed transfer is encrypted (AES-256-GCM); this is for measuring what that costs (docs/security.md)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l insecure -d 'Run without a group key: any host of the segment can then join, inject data, abort, and answer a receiver as its sender, whose data (and digest) the receiver takes (see docs/security.md, "Threat model"). Pin the sender with `recv --from`'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l resume -d 'With -o FILE: write under the fixed name .FILE.ethbcast.part next to FILE, and keep it when the transfer does not complete (interrupted, evicted, the sender gone). The next `recv --resume -o FILE` offers what it holds to the sender: the sender reads its input file and, if the bytes\' digest matches, starts its broadcast at the smallest offset every receiver holds (at 0 if a receiver holds nothing or other bytes; after `send --only-failed`, where the failed receivers stopped). The whole file\'s digest is checked before it is renamed into place; one that does not match is removed. Resuming needs the sender\'s input to be a file (-i), not a stream or a directory; a tree (--extract) is always received whole'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l no-clobber -d 'With -o FILE: never replace an existing FILE (refused at the start; a FILE that appears during the transfer is kept and the data received discarded). Without it an existing FILE is replaced once the new one is complete'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l quiet -d 'No messages on stderr but warnings (RUST_LOG=error hides those too)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -l json -d 'Print the outcome as JSON on stderr (stdout may carry the data), with the counters'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -s v -l verbose -d 'Log more on stderr: -v information, -vv debug events (default: warnings and errors; RUST_LOG takes precedence)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand recv" -s h -l help -d 'Print help'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l iface -d 'Network interface' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l backend -d 'Link backend to check: ring, socket, pnet or xdp' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l hostfile -d 'Also probe the hosts of this file (as `send --hostfile` reads it), each running `ethbcast doctor --listen`: one line per host and check (a broadcast reaches it; its MTU against this host\'s, and whether a frame of this host\'s MTU reaches it; the group\'s multicast address reaches it)' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l probe-wait -d 'How long to probe the hosts of --hostfile (less when all answered), e.g. 2s' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l group-id -d 'The group id whose multicast address is probed (as given to send and recv)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l group-address -d 'The group address probed: derived, broadcast or a multicast MAC (as given to send and recv)' -r
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l key-file -d 'Group key file (as given to send and recv): checked as send and recv read it (readable, mode 0600, owned by this user or root, well formed); probes and answers then carry keyed tags, so a listener answers only probes of this key, the prober takes only answers of it, and each host of --hostfile is checked to hold the same key' -r -F
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l listen -d 'After this host\'s checks (exit 1 if one fails), answer the probes of `ethbcast doctor --hostfile` run on another host, until Ctrl-C or SIGTERM'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -l json -d 'Print the checks as JSON on stdout: one object per line of the text output, with the check\'s id, its host (`local`, or the hostfile\'s), its status, what was found and the fix'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -s v -l verbose -d 'Log more on stderr: -v information, -vv debug events (default: warnings and errors; RUST_LOG takes precedence)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand doctor" -s h -l help -d 'Print help'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand keygen" -l passphrase -d 'Read a passphrase (one line) from standard input and write it with a fresh random salt instead: the key is then stretched from it with Argon2id on every host. A random key is stronger; a passphrase file is for hosts where one is typed'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand keygen" -s v -l verbose -d 'Log more on stderr: -v information, -vv debug events (default: warnings and errors; RUST_LOG takes precedence)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand keygen" -s h -l help -d 'Print help'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand help; and not __fish_seen_subcommand_from send recv doctor keygen help" -f -a "send" -d 'Send a file or a directory (-i) or standard input to the receivers'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand help; and not __fish_seen_subcommand_from send recv doctor keygen help" -f -a "recv" -d 'Receive one transfer: to stdout (default), a file (-o), a command\'s stdin (-O), or a directory (-x, a tree)'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand help; and not __fish_seen_subcommand_from send recv doctor keygen help" -f -a "doctor" -d 'Check this host before a transfer: the interface (exists, up, Ethernet, MTU), the capabilities, net.core.rmem_max, ETHBCAST_BACKEND, and opening the link; with --hostfile, every host of the file too (run `ethbcast doctor --listen` on those). One line per check with its fix; exit 1 if any check fails'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand help; and not __fish_seen_subcommand_from send recv doctor keygen help" -f -a "keygen" -d 'Write a fresh random group key to FILE (mode 0600; an existing file is not overwritten), to copy to every host and pass as --key-file'
complete -c ethbcast -n "__fish_ethbcast_using_subcommand help; and not __fish_seen_subcommand_from send recv doctor keygen help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
