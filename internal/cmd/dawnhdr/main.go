// Command dawnhdr writes the project's C declarations of the part of Dawn's C API that the
// dawn package uses, and a small Go table of enum names, from Dawn's API description
// (dawn.json of the exact revision the provisioned library was built from).
//
// The project does not vendor a generated webgpu.h: it declares only what it calls, so a
// layout or enum value can never come from a header of another revision. The output is
// committed; run `go generate ./internal/dawnrt/` after changing the list below or the dawn.json.
//
// Usage:
//
//	dawnhdr [-in dawn.json] [-h out.h] [-go out.go]
//
// Without -in it reads $FUSEDNORM_DAWN_JSON, else internal/cmd/dawnhdr/dawn.json in the module:
// Dawn's API description of the provisioned library's revision, committed beside this command
// (BSD-3-Clause, The Dawn & Tint Authors; the licence is the file's "_comment"; see NOTICE).
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// procs lists every function the runtime resolves: object (in dawn.json's words, "" for a
// free function) and method. Optional ones may be missing from the library.
var procs = []struct {
	object, method string
	optional       bool
}{
	{"", "create instance", false},
	{"instance", "request adapter", false},
	{"instance", "wait any", false},
	{"instance", "process events", false},
	{"instance", "release", false},
	{"adapter", "get info", false},
	{"adapter", "get limits", false},
	{"adapter", "has feature", false},
	{"adapter", "request device", false},
	{"adapter", "release", false},
	{"adapter info", "free members", false},
	{"device", "get limits", false},
	{"device", "has feature", false},
	{"device", "get queue", false},
	{"device", "create buffer", false},
	{"device", "create shader module", false},
	{"device", "create compute pipeline", false},
	{"device", "create bind group", false},
	{"device", "create command encoder", false},
	{"device", "create query set", true},
	{"device", "push error scope", false},
	{"device", "pop error scope", false},
	{"device", "destroy", false},
	{"device", "force loss", true},
	{"device", "set logging callback", true},
	{"device", "release", false},
	{"queue", "submit", false},
	{"queue", "write buffer", false},
	{"queue", "on submitted work done", false},
	{"queue", "release", false},
	{"buffer", "map async", false},
	{"buffer", "get const mapped range", false},
	{"buffer", "get mapped range", false},
	{"buffer", "unmap", false},
	{"buffer", "release", false},
	{"shader module", "release", false},
	{"compute pipeline", "get bind group layout", false},
	{"compute pipeline", "release", false},
	{"bind group layout", "release", false},
	{"bind group", "release", false},
	{"command encoder", "begin compute pass", false},
	{"command encoder", "copy buffer to buffer", false},
	{"command encoder", "resolve query set", true},
	{"command encoder", "finish", false},
	{"command encoder", "release", false},
	{"command buffer", "release", false},
	{"compute pass encoder", "set pipeline", false},
	{"compute pass encoder", "set bind group", false},
	{"compute pass encoder", "dispatch workgroups", false},
	{"compute pass encoder", "end", false},
	{"compute pass encoder", "release", false},
	{"query set", "destroy", true},
	{"query set", "release", true},
}

// extraTypes are declared even though no listed function names them directly: they reach
// the library through chains or descriptors.
var extraTypes = []string{"shader source WGSL", "instance capabilities", "s type", "feature name",
	"device descriptor", "query type", "backend type", "adapter type", "device lost reason", "logging type"}

// goEnums are written to the Go table: name -> dawn.json type.
var goEnums = []struct{ goName, typ string }{
	{"featureNames", "feature name"},
	{"backendTypeNames", "backend type"},
	{"adapterTypeNames", "adapter type"},
}

// enabled are the tags of items present in native Dawn; untagged items are always present.
var enabled = map[string]bool{"dawn": true, "native": true, "compat": true, "deprecated": true}

type record struct {
	name string // dawn.json name
	cat  string
	def  map[string]json.RawMessage
}

type member struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Annotation string `json:"annotation"`
	Length     any    `json:"length"`
	Tags       []string
}

type method struct {
	Name    string   `json:"name"`
	Returns string   `json:"returns"`
	Args    []member `json:"args"`
	Tags    []string `json:"tags"`
}

type enumValue struct {
	Name  string   `json:"name"`
	Value uint64   `json:"value"`
	Tags  []string `json:"tags"`
}

type typeDef struct {
	Category   string      `json:"category"`
	Members    []member    `json:"members"`
	Args       []member    `json:"args"`
	Methods    []method    `json:"methods"`
	Values     []enumValue `json:"values"`
	Returns    string      `json:"returns"`
	Extensible any         `json:"extensible"`
	Chained    string      `json:"chained"`
	Tags       []string    `json:"tags"`
	Type       string      `json:"type"`
}

func present(tags []string) bool {
	if len(tags) == 0 {
		return true
	}
	for _, t := range tags {
		if enabled[t] {
			return true
		}
	}
	return false
}

// enumPrefix places tagged enum values in their own numeric block, as Dawn does.
func enumPrefix(tags []string) uint64 {
	has := map[string]bool{}
	for _, t := range tags {
		has[t] = true
	}
	switch {
	case has["dawn"]:
		return 0x0005_0000
	case has["emscripten"]:
		return 0x0004_0000
	case has["compat"]:
		return 0x0002_0000
	}
	return 0
}

func camel(name string) string {
	var b strings.Builder
	for _, w := range strings.Fields(name) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

func lowerCamel(name string) string {
	c := camel(name)
	return strings.ToLower(c[:1]) + c[1:]
}

var natives = map[string]struct {
	c    string
	size int
}{
	"bool": {"WGPUBool", 4}, "char": {"char", 1}, "double": {"double", 8}, "float": {"float", 4},
	"int": {"int", 4}, "int32_t": {"int32_t", 4}, "size_t": {"size_t", 8}, "uint16_t": {"uint16_t", 2},
	"uint32_t": {"uint32_t", 4}, "uint64_t": {"uint64_t", 8}, "uint8_t": {"uint8_t", 1},
	"void": {"void", 0}, "void *": {"void *", 8}, "void const *": {"void const *", 8},
}

type gen struct {
	types map[string]*typeDef
	used  map[string]bool
	order []string // struct-like types in definition order
	seen  map[string]bool
}

func (g *gen) ctype(name string) string {
	if n, ok := natives[name]; ok {
		return n.c
	}
	t := g.types[name]
	if t == nil {
		log.Fatalf("unknown type %q", name)
	}
	if t.Category == "typedef" {
		return g.ctype(t.Type)
	}
	return "WGPU" + camel(name)
}

func (g *gen) decl(m member) string {
	t := g.ctype(m.Type)
	switch m.Annotation {
	case "":
		return t + " " + lowerCamel(m.Name)
	case "const*":
		return t + " const * " + lowerCamel(m.Name)
	case "*":
		return t + " * " + lowerCamel(m.Name)
	case "const*const*":
		return t + " const * const * " + lowerCamel(m.Name)
	}
	log.Fatalf("annotation %q of %s", m.Annotation, m.Name)
	return ""
}

// use marks a type and, for by-value struct members, defines its dependencies first.
func (g *gen) use(name string) {
	if _, ok := natives[name]; ok {
		return
	}
	if g.used[name] {
		return
	}
	if name == "chained struct" { // implicit in dawn.json: the header always declares it
		g.use("s type")
		return
	}
	g.used[name] = true
	t := g.types[name]
	if t == nil {
		log.Fatalf("unknown type %q", name)
	}
	switch t.Category {
	case "typedef":
		g.use(t.Type)
	case "structure", "callback info":
		if t.Extensible != nil || t.Chained != "" {
			g.use("chained struct")
		}
		if t.Chained != "" {
			g.use("s type")
		}
		for _, m := range t.Members {
			g.use(m.Type)
		}
		g.order = append(g.order, name)
	case "callback function", "function pointer":
		for _, a := range t.Args {
			g.use(a.Type)
		}
		if t.Returns != "" {
			g.use(t.Returns)
		}
		g.use("string view")
	}
}

func (g *gen) size(name string, annotation string) (size, align int) {
	if annotation != "" {
		return 8, 8
	}
	if n, ok := natives[name]; ok {
		return n.size, n.size
	}
	if name == "chained struct" {
		return 16, 8
	}
	t := g.types[name]
	switch t.Category {
	case "typedef":
		return g.size(t.Type, "")
	case "enum":
		return 4, 4
	case "bitmask":
		return 8, 8
	case "object", "callback function", "function pointer":
		return 8, 8
	case "structure", "callback info":
		off, al := 0, 1
		add := func(s, a int) {
			off = (off + a - 1) / a * a
			off += s
			if a > al {
				al = a
			}
		}
		if t.Chained != "" {
			add(16, 8)
		} else if t.Extensible != nil || t.Category == "callback info" {
			add(8, 8)
		}
		for _, m := range t.Members {
			add(g.size(m.Type, m.Annotation))
		}
		if t.Category == "callback info" {
			add(8, 8)
			add(8, 8)
		}
		return (off + al - 1) / al * al, al
	}
	log.Fatalf("no size for %q", name)
	return 0, 0
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("dawnhdr: ")
	in := flag.String("in", "", "dawn.json (default $FUSEDNORM_DAWN_JSON, else internal/cmd/dawnhdr/dawn.json in the module)")
	outH := flag.String("h", "", "C header to write")
	outGo := flag.String("go", "", "Go table to write")
	flag.Parse()
	if *in == "" {
		*in = os.Getenv("FUSEDNORM_DAWN_JSON")
	}
	if *in == "" {
		root, err := moduleRoot()
		if err != nil {
			log.Fatal(err)
		}
		*in = filepath.Join(root, "internal", "cmd", "dawnhdr", "dawn.json")
	}
	raw, err := os.ReadFile(*in)
	if err != nil {
		log.Fatalf("%v (give -in or FUSEDNORM_DAWN_JSON)", err)
	}
	sum := sha256.Sum256(raw)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		log.Fatal(err)
	}
	g := &gen{types: map[string]*typeDef{}, used: map[string]bool{}, seen: map[string]bool{}}
	for k, v := range top {
		if strings.HasPrefix(k, "_") {
			continue
		}
		var t typeDef
		if json.Unmarshal(v, &t) != nil || t.Category == "" {
			continue
		}
		if !present(t.Tags) {
			continue
		}
		g.types[k] = &t
	}

	type proc struct {
		cname, typedef string
		optional       bool
		ret            string
		args           []string
	}
	var ps []proc
	for _, p := range procs {
		var ret string
		var args []string
		switch {
		case p.object == "":
			t := g.types[p.method]
			if t == nil || t.Category != "function" {
				log.Fatalf("no function %q", p.method)
			}
			ret = t.Returns
			for _, a := range t.Args {
				g.use(a.Type)
				args = append(args, g.decl(a))
			}
		case p.method == "release" || p.method == "add ref":
			g.use(p.object)
			args = []string{g.ctype(p.object) + " " + lowerCamel(p.object)}
		case p.method == "free members":
			g.use(p.object)
			args = []string{g.ctype(p.object) + " " + lowerCamel(p.object)}
		default:
			o := g.types[p.object]
			if o == nil || o.Category != "object" {
				log.Fatalf("no object %q", p.object)
			}
			g.use(p.object)
			var m *method
			for i := range o.Methods {
				if o.Methods[i].Name == p.method && present(o.Methods[i].Tags) {
					m = &o.Methods[i]
				}
			}
			if m == nil {
				log.Fatalf("no method %q of %q", p.method, p.object)
			}
			ret = m.Returns
			args = append(args, g.ctype(p.object)+" "+lowerCamel(p.object))
			for _, a := range m.Args {
				g.use(a.Type)
				args = append(args, g.decl(a))
			}
		}
		if ret == "" {
			ret = "void"
		} else {
			g.use(ret)
		}
		name := camel(p.object) + camel(p.method)
		ps = append(ps, proc{cname: "wgpu" + name, typedef: "WGPUProc" + name, optional: p.optional,
			ret: g.ctype(ret), args: args})
	}
	for _, t := range extraTypes {
		g.use(t)
	}

	var h bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&h, format, a...) }
	w("// Code generated by internal/cmd/dawnhdr from dawn.json (sha256 %s). DO NOT EDIT.\n\n", hex.EncodeToString(sum[:]))
	w("// Declarations of the subset of Dawn's C API that the dawn package calls, with the\n")
	w("// layouts and values of the Dawn revision the provisioned library was built from.\n\n")
	w("#ifndef FUSEDNORM_WEBGPU_GEN_H\n#define FUSEDNORM_WEBGPU_GEN_H\n\n")
	w("#include <stddef.h>\n#include <stdint.h>\n\n")
	w("typedef uint32_t WGPUBool;\ntypedef uint64_t WGPUFlags;\n\n")

	names := func(cat ...string) []string {
		var out []string
		for n := range g.used {
			for _, c := range cat {
				if g.types[n].Category == c {
					out = append(out, n)
				}
			}
		}
		sort.Strings(out)
		return out
	}
	w("#define WGPU_GEN_STRLEN SIZE_MAX\n#define WGPU_GEN_WHOLE_SIZE UINT64_MAX\n")
	w("#define WGPU_GEN_QUERY_SET_INDEX_UNDEFINED UINT32_MAX\n#define WGPU_GEN_LIMIT_U32_UNDEFINED UINT32_MAX\n")
	w("#define WGPU_GEN_LIMIT_U64_UNDEFINED UINT64_MAX\n\n")
	for _, n := range names("object") {
		w("typedef struct WGPU%sImpl * WGPU%s;\n", camel(n), camel(n))
	}
	w("\n")
	for _, n := range names("enum") {
		c := "WGPU" + camel(n)
		w("typedef enum %s {\n", c)
		for _, v := range g.types[n].Values {
			if !present(v.Tags) {
				continue
			}
			w("    %s_%s = 0x%08X,\n", c, camel(v.Name), v.Value+enumPrefix(v.Tags))
		}
		w("    %s_Force32 = 0x7FFFFFFF\n} %s;\n\n", c, c)
	}
	for _, n := range names("bitmask") {
		c := "WGPU" + camel(n)
		w("typedef WGPUFlags %s;\n", c)
		for _, v := range g.types[n].Values {
			if present(v.Tags) {
				w("#define %s_%s ((%s)UINT64_C(0x%X))\n", c, camel(v.Name), c, v.Value+enumPrefix(v.Tags))
			}
		}
		w("\n")
	}
	for _, n := range names("typedef") {
		w("typedef %s WGPU%s;\n", g.ctype(g.types[n].Type), camel(n))
	}
	structs := append([]string{}, g.order...)
	w("typedef struct WGPUChainedStruct WGPUChainedStruct;\n")
	for _, n := range structs {
		if n == "chained struct" {
			continue
		}
		w("typedef struct WGPU%s WGPU%s;\n", camel(n), camel(n))
	}
	w("\n")
	for _, n := range names("callback function", "function pointer") {
		t := g.types[n]
		ret := "void"
		if t.Returns != "" {
			ret = g.ctype(t.Returns)
		}
		var args []string
		for _, a := range t.Args {
			args = append(args, g.decl(a))
		}
		if t.Category == "callback function" {
			args = append(args, "void * userdata1", "void * userdata2")
		}
		if len(args) == 0 {
			args = []string{"void"}
		}
		w("typedef %s (*WGPU%s)(%s);\n", ret, camel(n), strings.Join(args, ", "))
	}
	w("\n")
	w("struct WGPUChainedStruct {\n    struct WGPUChainedStruct * next;\n    WGPUSType sType;\n};\n\n")
	for _, n := range structs {
		if n == "chained struct" {
			continue
		}
		t := g.types[n]
		w("struct WGPU%s {\n", camel(n))
		switch {
		case t.Chained != "":
			w("    WGPUChainedStruct chain;\n")
		case t.Extensible != nil || t.Category == "callback info":
			w("    WGPUChainedStruct * nextInChain;\n")
		}
		for _, m := range t.Members {
			w("    %s;\n", g.decl(m))
		}
		if t.Category == "callback info" {
			w("    void * userdata1;\n    void * userdata2;\n")
		}
		w("};\n\n")
	}
	w("#if UINTPTR_MAX == UINT64_MAX\n")
	w("// Sizes the generator computed for LP64 from dawn.json; the C compiler must agree.\n")
	for _, n := range structs {
		s, _ := g.size(n, "")
		c := "WGPU" + camel(n)
		if n == "chained struct" {
			c = "WGPUChainedStruct"
		}
		w("typedef char wgpu_gen_size_of_%s[sizeof(%s) == %d ? 1 : -1];\n", c, c, s)
	}
	w("#endif\n\n")
	for _, p := range ps {
		w("typedef %s (*%s)(%s);\n", p.ret, p.typedef, strings.Join(p.args, ", "))
	}
	w("\n// WGPU_GEN_PROCS(REQ, OPT) expands REQ(name) or OPT(name) once per resolved function,\n")
	w("// where wgpu##name is the symbol and WGPUProc##name its type.\n")
	w("#define WGPU_GEN_PROCS(REQ, OPT) \\\n")
	for i, p := range ps {
		m := "REQ"
		if p.optional {
			m = "OPT"
		}
		end := " \\"
		if i == len(ps)-1 {
			end = ""
		}
		w("    %s(%s)%s\n", m, strings.TrimPrefix(p.cname, "wgpu"), end)
	}
	w("\n#endif // FUSEDNORM_WEBGPU_GEN_H\n")

	var gb bytes.Buffer
	fmt.Fprintf(&gb, "// Code generated by internal/cmd/dawnhdr from dawn.json (sha256 %s). DO NOT EDIT.\n\n", hex.EncodeToString(sum[:]))
	fmt.Fprintf(&gb, "//go:build cgo\n\npackage dawnrt\n\n")
	for _, e := range goEnums {
		fmt.Fprintf(&gb, "// %s maps each value of Dawn's %q enum to its name.\n", e.goName, e.typ)
		fmt.Fprintf(&gb, "var %s = map[uint32]string{\n", e.goName)
		for _, v := range g.types[e.typ].Values {
			if present(v.Tags) {
				fmt.Fprintf(&gb, "0x%X: %q,\n", v.Value+enumPrefix(v.Tags), camel(v.Name))
			}
		}
		fmt.Fprintf(&gb, "}\n\n")
	}
	fmt.Fprintf(&gb, "// Buffer usages, from Dawn's \"buffer usage\" bitmask.\nconst (\n")
	for _, v := range g.types["buffer usage"].Values {
		if present(v.Tags) && v.Value != 0 {
			fmt.Fprintf(&gb, "Usage%s Usage = 0x%X\n", camel(v.Name), v.Value)
		}
	}
	fmt.Fprintf(&gb, ")\n")
	src, err := format.Source(gb.Bytes())
	if err != nil {
		log.Fatalf("format Go: %v\n%s", err, gb.Bytes())
	}
	if *outH != "" {
		if err := os.WriteFile(*outH, h.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
	} else {
		os.Stdout.Write(h.Bytes())
	}
	if *outGo != "" {
		if err := os.WriteFile(*outGo, src, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = up
	}
}
