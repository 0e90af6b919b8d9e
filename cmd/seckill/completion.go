package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// runCompletion prints a completion script for the shell in args, made
// from the command table: the commands, each one's flags and positional
// words, so that it completes what this binary takes.
func runCompletion(_ context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		return flag.ErrHelp
	}
	if len(args) != 1 {
		fmt.Fprintln(stderr, "seckill completion: want one shell: bash, zsh or fish")
		return errUsage
	}
	switch args[0] {
	case "bash":
		bashCompletion(stdout)
	case "zsh":
		zshCompletion(stdout)
	case "fish":
		fishCompletion(stdout)
	default:
		fmt.Fprintf(stderr, "seckill completion: unknown shell %q: want bash, zsh or fish\n", args[0])
		return errUsage
	}
	return nil
}

// completed is what completion offers for one command.
type completed struct {
	command
	flags []*flag.Flag // the visible flags
}

func completions() []completed {
	var out []completed
	for _, c := range commands {
		cc := completed{command: c}
		c.flagSet().visible(func(f *flag.Flag) { cc.flags = append(cc.flags, f) })
		out = append(out, cc)
	}
	return out
}

func (c completed) flagNames(bools bool) []string {
	var names []string
	for _, f := range c.flags {
		if !bools || isBoolFlag(f) {
			names = append(names, "--"+f.Name)
		}
	}
	return names
}

// brief is the first clause of a flag's description, for the shells that
// show one beside each candidate.
func brief(s string) string {
	if i := strings.IndexAny(s, ":;(."); i > 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// shellQuote quotes s for a POSIX shell, zsh and fish alike.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func bashCompletion(w io.Writer) {
	fmt.Fprintf(w, `# bash completion for seckill: source <(seckill completion bash)
_seckill() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} words bools
    if (( COMP_CWORD == 1 )); then
        COMPREPLY=($(compgen -W %s -- "$cur"))
        return
    fi
    case ${COMP_WORDS[1]} in
`, shellQuote(strings.Join(commandNames(), " ")+" --help --version"))
	for _, c := range completions() {
		words := append(c.flagNames(false), c.words...)
		if len(words) == 0 {
			continue
		}
		if len(c.flags) > 0 {
			words = append(words, "--help")
		}
		fmt.Fprintf(w, "    %s) words=%s bools=%s ;;\n", c.name, shellQuote(strings.Join(words, " ")), shellQuote(strings.Join(c.flagNames(true), " ")))
	}
	fmt.Fprint(w, `    *) return ;;
    esac
    # After a flag that takes a value, leave the value to the shell's own
    # completion (files).
    if [[ $prev == --* && $prev != *=* && " $bools " != *" $prev "* && $cur != -* && " $words " == *" $prev "* ]]; then
        COMPREPLY=()
        return
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _seckill seckill
`)
}

func zshCompletion(w io.Writer) {
	fmt.Fprint(w, `#compdef seckill
# zsh completion for seckill: seckill completion zsh > "${fpath[1]}/_seckill", or
# source <(seckill completion zsh) after compinit
_seckill() {
    local -a items bools
    if (( CURRENT == 2 )); then
        items=(
`)
	for _, c := range commands {
		fmt.Fprintf(w, "            %s\n", shellQuote(c.name+":"+c.summary))
	}
	fmt.Fprint(w, `        )
        _describe command items
        return
    fi
    case ${words[2]} in
`)
	for _, c := range completions() {
		if len(c.flags) == 0 && len(c.words) == 0 {
			continue
		}
		fmt.Fprintf(w, "    %s)\n        bools=(%s)\n        items=(", c.name, strings.Join(c.flagNames(true), " "))
		for _, f := range c.flags {
			_, text := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "\n            %s", shellQuote("--"+f.Name+":"+brief(text)))
		}
		for _, word := range c.words {
			fmt.Fprintf(w, "\n            %s", shellQuote(word))
		}
		fmt.Fprint(w, "\n        ) ;;\n")
	}
	fmt.Fprint(w, `    *) _files; return ;;
    esac
    # After a flag that takes a value, complete the value as a file.
    local prev=${words[CURRENT-1]}
    if [[ $prev == --* && $prev != *=* && ${bools[(Ie)$prev]} -eq 0 && ${words[CURRENT]} != -* ]] &&
        (( ${items[(I)${prev}:*]} )); then
        _files
        return
    fi
    _describe option items
}
if [[ $funcstack[1] == _seckill ]]; then
    _seckill "$@"
else
    compdef _seckill seckill
fi
`)
}

func fishCompletion(w io.Writer) {
	fmt.Fprintln(w, "# fish completion for seckill: seckill completion fish > ~/.config/fish/completions/seckill.fish")
	fmt.Fprintf(w, "complete -c seckill -n __fish_use_subcommand -l help -d %s\n", shellQuote("the commands"))
	fmt.Fprintf(w, "complete -c seckill -n __fish_use_subcommand -l version -d %s\n", shellQuote("the version"))
	for _, c := range completions() {
		fmt.Fprintf(w, "complete -c seckill -f -n __fish_use_subcommand -a %s -d %s\n", c.name, shellQuote(c.summary))
		when := shellQuote("__fish_seen_subcommand_from " + c.name)
		for _, f := range c.flags {
			_, text := flag.UnquoteUsage(f)
			value := " -r"
			if isBoolFlag(f) {
				value = ""
			}
			fmt.Fprintf(w, "complete -c seckill -n %s -l %s%s -d %s\n", when, f.Name, value, shellQuote(brief(text)))
		}
		if len(c.words) > 0 {
			fmt.Fprintf(w, "complete -c seckill -f -n %s -a %s\n", when, shellQuote(strings.Join(c.words, " ")))
		}
	}
}
