_ethbcast() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="ethbcast"
                ;;
            ethbcast,doctor)
                cmd="ethbcast__subcmd__doctor"
                ;;
            ethbcast,help)
                cmd="ethbcast__subcmd__help"
                ;;
            ethbcast,keygen)
                cmd="ethbcast__subcmd__keygen"
                ;;
            ethbcast,recv)
                cmd="ethbcast__subcmd__recv"
                ;;
            ethbcast,send)
                cmd="ethbcast__subcmd__send"
                ;;
            ethbcast__subcmd__help,doctor)
                cmd="ethbcast__subcmd__help__subcmd__doctor"
                ;;
            ethbcast__subcmd__help,help)
                cmd="ethbcast__subcmd__help__subcmd__help"
                ;;
            ethbcast__subcmd__help,keygen)
                cmd="ethbcast__subcmd__help__subcmd__keygen"
                ;;
            ethbcast__subcmd__help,recv)
                cmd="ethbcast__subcmd__help__subcmd__recv"
                ;;
            ethbcast__subcmd__help,send)
                cmd="ethbcast__subcmd__help__subcmd__send"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        ethbcast)
            opts="-v -h -V --verbose --help --version send recv doctor keygen help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__doctor)
            opts="-v -h --iface --backend --hostfile --probe-wait --listen --group-id --group-address --json --key-file --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --iface)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backend)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --hostfile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --probe-wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --group-id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --group-address)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --key-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__help)
            opts="send recv doctor keygen help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__help__subcmd__doctor)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__help__subcmd__keygen)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__help__subcmd__recv)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__help__subcmd__send)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__keygen)
            opts="-v -h --passphrase --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__recv)
            opts="-o -O -x -v -h --iface --group-id --backend --wait-mode --window --ack-every --nack-gather --no-peer-repair --key-file --insecure --group-address --output --command --extract --resume --no-clobber --timeout --wait --from --user --max-bytes --quiet --json --status-file --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --iface)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --group-id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backend)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --wait-mode)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ack-every)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nack-gather)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --key-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --group-address)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --command)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -O)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --extract)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -x)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --from)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --user)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-bytes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --status-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        ethbcast__subcmd__send)
            opts="-i -v -h --iface --group-id --backend --wait-mode --window --ack-every --nack-gather --no-peer-repair --key-file --insecure --group-address --input --receivers --hostfile --only-failed --min-receivers --max-wait --max-rate --digest --chunk --wait --timeout --report-wait --quiet --json --status-file --verbose --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --iface)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --group-id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backend)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --wait-mode)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ack-every)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nack-gather)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --key-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --group-address)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --input)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -i)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --receivers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --hostfile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --only-failed)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-receivers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-rate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --digest)
                    COMPREPLY=($(compgen -W "xxh3 blake3" -- "${cur}"))
                    return 0
                    ;;
                --chunk)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --report-wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --status-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _ethbcast -o nosort -o bashdefault -o default ethbcast
else
    complete -F _ethbcast -o bashdefault -o default ethbcast
fi
