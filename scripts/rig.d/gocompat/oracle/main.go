// gocompat-oracle answers with Go's own results for the functions
// crates/gocompat reproduces, so that crate's test table holds Go's outputs
// and error texts rather than remembered ones.
//
// Each input line is `FUNC<TAB>ARGS` (ARGS a JSON object); each output line
// repeats it and adds `<TAB>RESULT`, a JSON object: `{"v": ...}` on success,
// `{"err": "..."}` with the error's text on failure. Lines that are empty or
// start with `#` are copied as they are. With `-isprint` it writes the
// table of crates/gocompat/src/isprint.rs instead.
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/miekg/dns"
	"github.com/spf13/pflag"
)

type args struct {
	S    string `json:"s"`
	T    string `json:"t"`
	Base int    `json:"base"`
	Bits int    `json:"bits"`
	Ns   int64  `json:"ns"`
}

// flagArgs is a command line and the flags it is parsed against, for
// Go's flag package (dialect "flag") or spf13/pflag ("pflag", with
// Kubernetes' `_`-to-`-` normalisation when wordsep is set).
type flagArgs struct {
	Dialect string     `json:"dialect"`
	WordSep bool       `json:"wordsep"`
	Flags   []flagSpec `json:"flags"`
	Args    []string   `json:"args"`
}

type flagSpec struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // bool, int, string, duration, or a type name of the job's own
	Default string `json:"default"`
	Help    string `json:"help"`
	Short   string `json:"short"`
}

// other is a value of a job's own type, named by pflag's Type().
type other struct{ v, name string }

func (o *other) String() string     { return o.v }
func (o *other) Set(s string) error { o.v = s; return nil }
func (o *other) Type() string       { return o.name }

// flagResult is what a parse left: every flag's value as its Value prints
// it, the flags given, the other arguments; or the error's text.
type flagResult struct {
	Values map[string]string `json:"values,omitempty"`
	Set    []string          `json:"set,omitempty"`
	Rest   []string          `json:"rest,omitempty"`
	Help   bool              `json:"help,omitempty"`
	Usage  string            `json:"usage"`
}

func goFlags(a flagArgs) (*flagResult, error) {
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range a.Flags {
		switch f.Kind {
		case "bool":
			fs.Bool(f.Name, f.Default == "true", f.Help)
		case "int":
			n, _ := strconv.ParseInt(f.Default, 0, 64)
			fs.Int(f.Name, int(n), f.Help)
		case "string":
			fs.String(f.Name, f.Default, f.Help)
		case "duration":
			d, _ := time.ParseDuration(f.Default)
			fs.Duration(f.Name, d, f.Help)
		default:
			return nil, fmt.Errorf("gocompat-oracle: no kind %q in Go's flag here", f.Kind)
		}
	}
	var usage strings.Builder
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	r := &flagResult{Usage: usage.String(), Values: map[string]string{}}
	err := fs.Parse(a.Args)
	if err == flag.ErrHelp {
		return &flagResult{Help: true, Usage: r.Usage}, nil
	}
	if err != nil {
		return nil, err
	}
	fs.VisitAll(func(f *flag.Flag) { r.Values[f.Name] = f.Value.String() })
	fs.Visit(func(f *flag.Flag) { r.Set = append(r.Set, f.Name) })
	r.Rest = fs.Args()
	return r, nil
}

func pFlags(a flagArgs) (*flagResult, error) {
	fs := pflag.NewFlagSet("prog", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if a.WordSep {
		fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
			return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
		})
	}
	for _, f := range a.Flags {
		switch f.Kind {
		case "bool":
			fs.BoolP(f.Name, f.Short, f.Default == "true", f.Help)
		case "int":
			n, _ := strconv.ParseInt(f.Default, 0, 64)
			fs.IntP(f.Name, f.Short, int(n), f.Help)
		case "string":
			fs.StringP(f.Name, f.Short, f.Default, f.Help)
		case "duration":
			d, _ := time.ParseDuration(f.Default)
			fs.DurationP(f.Name, f.Short, d, f.Help)
		default:
			fs.VarP(&other{v: f.Default, name: f.Kind}, f.Name, f.Short, f.Help)
		}
	}
	r := &flagResult{Usage: fs.FlagUsages(), Values: map[string]string{}}
	err := fs.Parse(a.Args)
	if err == pflag.ErrHelp {
		return &flagResult{Help: true, Usage: r.Usage}, nil
	}
	if err != nil {
		return nil, err
	}
	fs.VisitAll(func(f *pflag.Flag) { r.Values[f.Name] = f.Value.String() })
	fs.Visit(func(f *pflag.Flag) { r.Set = append(r.Set, f.Name) })
	r.Rest = fs.Args()
	return r, nil
}

type cidr struct {
	IP      string `json:"ip"`
	Network string `json:"network"`
	Prefix  int    `json:"prefix"`
}

func answer(fn string, a args) (any, error) {
	switch fn {
	case "ParseBool":
		return strconv.ParseBool(a.S)
	case "ParseInt":
		return strconv.ParseInt(a.S, a.Base, a.Bits)
	case "ParseUint":
		return strconv.ParseUint(a.S, a.Base, a.Bits)
	case "Quote":
		return strconv.Quote(a.S), nil
	case "ParseDuration":
		d, err := time.ParseDuration(a.S)
		return int64(d), err
	case "DurationString":
		return time.Duration(a.Ns).String(), nil
	case "ParseCIDR":
		ip, n, err := net.ParseCIDR(a.S)
		if err != nil {
			return nil, err
		}
		ones, _ := n.Mask.Size()
		return cidr{IP: ip.String(), Network: n.IP.String(), Prefix: ones}, nil
	case "RegexpCompile":
		_, err := regexp.Compile(a.S)
		return "ok", err
	case "NewRR":
		// miekg/dns, CoreDNS's DNS library: one record's text as the
		// template plugin reads it (wire::zonefile::parse_rr).
		rr, err := dns.NewRR(a.S)
		if err != nil || rr == nil {
			return nil, err
		}
		return rr.String(), nil
	case "FilepathClean":
		return filepath.Clean(a.S), nil
	case "FilepathJoin":
		return filepath.Join(a.S, a.T), nil
	case "OsStat":
		_, err := os.Stat(a.S)
		return "ok", err
	case "HexDecodeString":
		b, err := hex.DecodeString(a.S)
		// As hex again: the bytes need not be text.
		return hex.EncodeToString(b), err
	}
	return nil, fmt.Errorf("gocompat-oracle: unknown function %q", fn)
}

// isPrintTable writes crates/gocompat/src/isprint.rs: the runes Go's
// strconv.IsPrint accepts, as ranges, so Quote escapes what Go escapes
// (unassigned code points included) without remembering Unicode's tables.
func isPrintTable(w *bufio.Writer) {
	fmt.Fprintf(w, "//! Written by `gocompat-oracle -isprint` (scripts/rig.d/gocompat) from Go's\n")
	fmt.Fprintf(w, "//! `strconv.IsPrint`: do not edit; `tests/go_outputs.rs` checks it.\n\n")
	fmt.Fprintf(w, "/// The inclusive ranges of the runes `strconv.IsPrint` accepts, in order.\n")
	fmt.Fprintf(w, "#[rustfmt::skip]\npub(crate) const PRINTABLE: &[(u32, u32)] = &[\n")
	var lo rune = -1
	n := 0
	flush := func(hi rune) {
		if n%4 == 0 {
			fmt.Fprintf(w, "   ")
		}
		fmt.Fprintf(w, " (0x%05x, 0x%05x),", lo, hi)
		n++
		if n%4 == 0 {
			fmt.Fprintln(w)
		}
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		p := strconv.IsPrint(r)
		if p && lo < 0 {
			lo = r
		} else if !p && lo >= 0 {
			flush(r - 1)
			lo = -1
		}
	}
	if lo >= 0 {
		flush(unicode.MaxRune)
	}
	if n%4 != 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "];\n")
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-isprint" {
		w := bufio.NewWriter(os.Stdout)
		isPrintTable(w)
		w.Flush()
		return
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for n := 1; in.Scan(); n++ {
		line := in.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			fmt.Fprintln(out, line)
			continue
		}
		fields := strings.SplitN(line, "\t", 3)
		if len(fields) < 2 {
			fmt.Fprintf(os.Stderr, "gocompat-oracle: line %d: want FUNC<TAB>ARGS\n", n)
			os.Exit(2)
		}
		var v any
		var err error
		if fields[0] == "Flags" {
			var a flagArgs
			if e := json.Unmarshal([]byte(fields[1]), &a); e != nil {
				fmt.Fprintf(os.Stderr, "gocompat-oracle: line %d: %v\n", n, e)
				os.Exit(2)
			}
			if a.Dialect == "pflag" {
				v, err = pFlags(a)
			} else {
				v, err = goFlags(a)
			}
		} else {
			var a args
			if e := json.Unmarshal([]byte(fields[1]), &a); e != nil {
				fmt.Fprintf(os.Stderr, "gocompat-oracle: line %d: %v\n", n, e)
				os.Exit(2)
			}
			v, err = answer(fields[0], a)
		}
		result := map[string]any{"v": v}
		if err != nil {
			if strings.HasPrefix(err.Error(), "gocompat-oracle:") {
				fmt.Fprintf(os.Stderr, "line %d: %v\n", n, err)
				os.Exit(2)
			}
			result = map[string]any{"err": err.Error()}
		}
		enc, err := json.Marshal(result)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gocompat-oracle: line %d: %v\n", n, err)
			os.Exit(2)
		}
		fmt.Fprintf(out, "%s\t%s\t%s\n", fields[0], fields[1], enc)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "gocompat-oracle: %v\n", err)
		os.Exit(2)
	}
}
