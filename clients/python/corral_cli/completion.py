"""`corral completion bash|zsh`: a shell completion script, written from the grammar itself, so
it names every command and option there is (and no other).

It completes command names, each command's options, the global options anywhere, and the values
of options with a fixed set of choices. zsh loads the same script through its bashcompinit.

Must not: call the daemon (it completes no agent ids: that would need one).
"""

from __future__ import annotations

import argparse
import shlex


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    body = _bash(parser)
    if shell == "zsh":
        return (
            "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"
            + body
        )
    return body


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(parser: argparse.ArgumentParser) -> list[str]:
    """A command's options, and the choices of its positional arguments."""
    words: list[str] = []
    for action in parser._actions:
        if action.option_strings:
            words.extend(s for s in action.option_strings if s.startswith("--") or s == "-f")
        elif action.choices and not isinstance(action, argparse._SubParsersAction):
            words.extend(str(choice) for choice in action.choices)
    return words


def _choices(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each option with a fixed set of values: those values."""
    return {
        flag: [str(c) for c in action.choices]
        for action in parser._actions
        if action.option_strings and action.choices
        for flag in action.option_strings
    }


def _bash(parser: argparse.ArgumentParser) -> str:
    commands = _subcommands(parser)
    top = _words(parser) + list(commands)
    valued = sorted(
        flag
        for action in parser._actions
        if action.option_strings and action.nargs != 0
        for flag in action.option_strings
    )
    cases = [
        f"        {shlex.quote(name)}) words={shlex.quote(' '.join(_words(sub)))} ;;"
        for name, sub in commands.items()
    ]
    values: dict[str, list[str]] = {}
    for sub in commands.values():
        values.update(_choices(sub))
    value_cases = [
        f'        {flag}) COMPREPLY=($(compgen -W {shlex.quote(" ".join(choices))} -- "$cur")); '
        "return ;;"
        for flag, choices in sorted(values.items())
    ]
    return "\n".join(
        [
            "# corral completion for bash (source <(corral completion bash))",
            "_corral() {",
            '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
            '    local cmd="" words="" i',
            '    case "$prev" in',
            *value_cases,
            "    esac",
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            '        case "${COMP_WORDS[i]}" in',
            f"            {'|'.join(valued)}) ((i++)) ;;",
            "            -*) ;;",
            '            *) cmd="${COMP_WORDS[i]}"; break ;;',
            "        esac",
            "    done",
            '    case "$cmd" in',
            f"        '') words={shlex.quote(' '.join(top))} ;;",
            *cases,
            "    esac",
            '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
            "}",
            "complete -o default -F _corral corral",
        ]
    )
