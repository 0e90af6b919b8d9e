package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// helpWidth is where help wraps a flag's description.
const helpWidth = 88

// flagSet returns the command's flags as its run registers them.
func (c *command) flagSet() *flagSet {
	fs := newFlagSet(c.name)
	if c.flags != nil {
		c.flags(fs)
	}
	return fs
}

// help prints the command's help: its summary, usage line, flags under
// their headings with each one's default and variable, and examples.
func (c *command) help(w io.Writer) {
	fs := c.flagSet()
	fmt.Fprintf(w, "seckill %s: %s\n\nUsage: seckill %s", c.name, c.summary, c.name)
	hasFlags := false
	fs.visible(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, " [flags]")
	}
	if c.args != "" {
		fmt.Fprint(w, " "+c.args)
	}
	fmt.Fprintln(w)
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.about, "\n"))
	}
	for _, g := range fs.sections() {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			printFlag(w, fs.Lookup(name))
		}
	}
	if len(fs.aliases) > 0 {
		olds := make([]string, 0, len(fs.aliases))
		for old, name := range fs.aliases {
			olds = append(olds, fmt.Sprintf("--%s (%s): use --%s", old, envName(old), name))
		}
		slices.Sort(olds)
		fmt.Fprintf(w, "\nDeprecated, still taken with a warning:\n  %s\n", strings.Join(olds, "\n  "))
	}
	if hasFlags {
		fmt.Fprintln(w, "\nEach flag also reads the variable shown ($SECKILL_…); a flag given wins.")
	}
	if len(c.examples) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, e := range c.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// printFlag prints one flag: its name, the kind of value, its default and
// variable, then its description wrapped.
func printFlag(w io.Writer, f *flag.Flag) {
	kind, text := flag.UnquoteUsage(f)
	line := "  --" + f.Name
	if kind != "" {
		line += " " + kind
	}
	if !isZeroDefault(f) {
		def := f.DefValue
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isString := g.Get().(string); isString {
				def = fmt.Sprintf("%q", def)
			}
		}
		line += "  (default " + def + ")"
	}
	line += "  $" + envName(f.Name)
	fmt.Fprintln(w, line)
	for _, l := range wrap(text, helpWidth-6) {
		fmt.Fprintf(w, "      %s\n", l)
	}
}

// isZeroDefault reports whether f's default is its type's zero value,
// which help leaves out, as the flag package does.
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false":
		return true
	}
	return false
}

// wrap breaks s into lines of at most width, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
