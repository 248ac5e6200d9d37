package wire

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fieldNumbers has one row per field number constant of the package: the field it
// names, the wire type the package reads and writes it with, and its type in the
// .proto (which says more: UTF-8 for a string, the message a message field holds,
// signed or not, packed or not). The constants' values are read from the source, so a
// row names its constant once.
var fieldNumbers = []struct {
	name  string
	field protoreflect.FullName
	wire  protowire.Type
	proto string // describe's form
}{
	{"ReplicateRequestOriginNode", "fanout.v1.ReplicateRequest.origin_node", protowire.BytesType, "string"},
	{"ReplicateRequestEvents", "fanout.v1.ReplicateRequest.events", protowire.BytesType, "repeated fanout.v1.Event"},
	{"ReplicateRequestSubmittedAtUnixNanos", "fanout.v1.ReplicateRequest.submitted_at_unix_nanos", protowire.BytesType, "packed int64"},

	{"ReplicateStreamRequestSeq", "fanout.v1.ReplicateStreamRequest.seq", protowire.VarintType, "uint64"},
	{"ReplicateStreamRequestBatch", "fanout.v1.ReplicateStreamRequest.batch", protowire.BytesType, "fanout.v1.ReplicateRequest"},
	{"ReplicateStreamRequestHold", "fanout.v1.ReplicateStreamRequest.answer_hold_micros", protowire.VarintType, "uint32"},

	{"SubmitRequestEvents", "fanout.v1.SubmitRequest.events", protowire.BytesType, "repeated fanout.v1.Event"},
	{"SubmitRequestAck", "fanout.v1.SubmitRequest.ack", protowire.VarintType, "enum"},
	{"SubmitRequestAckTimeout", "fanout.v1.SubmitRequest.ack_timeout", protowire.BytesType, "google.protobuf.Duration"},
	{"SubmitRequestRequestID", "fanout.v1.SubmitRequest.request_id", protowire.VarintType, "uint64"},
	{"SubmitRequestWindow", "fanout.v1.SubmitRequest.window_answers", protowire.VarintType, "bool"},
	{"SubmitRequestHold", "fanout.v1.SubmitRequest.answer_hold_micros", protowire.VarintType, "uint32"},

	{"SubmitResponseRequestID", "fanout.v1.SubmitResponse.request_id", protowire.VarintType, "uint64"},
	{"SubmitResponseVersions", "fanout.v1.SubmitResponse.versions", protowire.BytesType, "packed uint64"},
	{"SubmitResponsePeerAcks", "fanout.v1.SubmitResponse.peer_acks", protowire.BytesType, "repeated fanout.v1.PeerAck"},
	{"SubmitResponseSatisfied", "fanout.v1.SubmitResponse.satisfied", protowire.VarintType, "bool"},
	{"SubmitResponseResults", "fanout.v1.SubmitResponse.results", protowire.BytesType, "repeated fanout.v1.EventResult"},
	{"SubmitResponseRequestIDs", "fanout.v1.SubmitResponse.request_ids", protowire.BytesType, "packed uint64"},

	{"EventResultOutcome", "fanout.v1.EventResult.outcome", protowire.VarintType, "enum"},
	{"EventResultRevision", "fanout.v1.EventResult.revision", protowire.VarintType, "uint64"},
	{"EventResultCurrentVersion", "fanout.v1.EventResult.current_version", protowire.VarintType, "uint64"},
	{"EventResultCurrentOrigin", "fanout.v1.EventResult.current_origin", protowire.BytesType, "string"},
	{"EventResultDetail", "fanout.v1.EventResult.detail", protowire.BytesType, "string"},

	{"PeerAckPeer", "fanout.v1.PeerAck.peer", protowire.BytesType, "string"},
	{"PeerAckState", "fanout.v1.PeerAck.state", protowire.VarintType, "enum"},
	{"PeerAckDetail", "fanout.v1.PeerAck.detail", protowire.BytesType, "string"},

	{"EventTaskID", "fanout.v1.Event.task_id", protowire.BytesType, "string"},
	{"EventPayload", "fanout.v1.Event.payload", protowire.BytesType, "bytes"},
	{"EventAttributes", "fanout.v1.Event.attributes", protowire.BytesType, "map<string, string>"},
	{"EventVersion", "fanout.v1.Event.version", protowire.VarintType, "uint64"},
	{"EventTTL", "fanout.v1.Event.ttl", protowire.BytesType, "google.protobuf.Duration"},
	{"EventDeleted", "fanout.v1.Event.deleted", protowire.VarintType, "bool"},

	{"AttributesEntryKey", "fanout.v1.Event.AttributesEntry.key", protowire.BytesType, "string"},
	{"AttributesEntryValue", "fanout.v1.Event.AttributesEntry.value", protowire.BytesType, "string"},

	{"SubscribeResponseEvent", "fanout.v1.SubscribeResponse.event", protowire.BytesType, "fanout.v1.Event"},
	{"SubscribeResponseOriginNode", "fanout.v1.SubscribeResponse.origin_node", protowire.BytesType, "string"},
	{"SubscribeResponseSubmittedAt", "fanout.v1.SubscribeResponse.submitted_at", protowire.BytesType, "google.protobuf.Timestamp"},
	{"SubscribeResponseRevision", "fanout.v1.SubscribeResponse.revision", protowire.VarintType, "uint64"},
	{"SubscribeResponseBatch", "fanout.v1.SubscribeResponse.batch", protowire.BytesType, "repeated fanout.v1.Entry"},
	{"SubscribeResponseSnapshotComplete", "fanout.v1.SubscribeResponse.snapshot_complete", protowire.VarintType, "bool"},

	{"EntryEvent", "fanout.v1.Entry.event", protowire.BytesType, "fanout.v1.Event"},
	{"EntryOriginNode", "fanout.v1.Entry.origin_node", protowire.BytesType, "string"},
	{"EntrySubmittedAt", "fanout.v1.Entry.submitted_at", protowire.BytesType, "google.protobuf.Timestamp"},
	{"EntryRevision", "fanout.v1.Entry.revision", protowire.VarintType, "uint64"},

	{"TimestampSeconds", "google.protobuf.Timestamp.seconds", protowire.VarintType, "int64"},
	{"TimestampNanos", "google.protobuf.Timestamp.nanos", protowire.VarintType, "int32"},
	{"DurationSeconds", "google.protobuf.Duration.seconds", protowire.VarintType, "int64"},
	{"DurationNanos", "google.protobuf.Duration.nanos", protowire.VarintType, "int32"},
}

// sameNumber lists constants the code uses one for the other: AppendEntry writes an
// Entry that is also a SubscribeResponse, readDelivery reads an Entry with the
// response's numbers, and ReadSecondsNanos reads a Timestamp as a Duration.
var sameNumber = [][2]string{
	{"SubscribeResponseEvent", "EntryEvent"},
	{"SubscribeResponseOriginNode", "EntryOriginNode"},
	{"SubscribeResponseSubmittedAt", "EntrySubmittedAt"},
	{"SubscribeResponseRevision", "EntryRevision"},
	{"TimestampSeconds", "DurationSeconds"},
	{"TimestampNanos", "DurationNanos"},
}

// TestFieldNumbers checks every field number constant against the generated
// descriptors: the field exists, has that number, and is of the row's type, which
// the row's wire type is the encoding of. A constant without a row, or a row without
// a constant, fails too.
func TestFieldNumbers(t *testing.T) {
	consts := fieldConstants(t)
	files := descriptors(t)
	rows := map[string]bool{}
	for _, row := range fieldNumbers {
		t.Run(row.name, func(t *testing.T) {
			if rows[row.name] {
				t.Fatal("two rows")
			}
			rows[row.name] = true
			num, ok := consts[row.name]
			if !ok {
				t.Fatal("no such constant in the package")
			}
			fd := findField(t, files, row.field)
			if fd.Number() != num {
				t.Errorf("the constant is %d; %s is field %d", num, row.field, fd.Number())
			}
			if got := describe(fd); got != row.proto {
				t.Errorf("%s is %s, the package treats it as %s", row.field, got, row.proto)
			}
			if got := wireType(fd); got != row.wire {
				t.Errorf("%s is written as wire type %d, the package uses %d", row.field, got, row.wire)
			}
		})
	}
	for name := range consts {
		if !rows[name] {
			t.Errorf("constant %s has no row in fieldNumbers: add the field it names", name)
		}
	}
	for _, p := range sameNumber {
		if consts[p[0]] != consts[p[1]] {
			t.Errorf("%s = %d and %s = %d: the code uses one for the other", p[0], consts[p[0]], p[1], consts[p[1]])
		}
	}
}

// fieldConstants reads the package's source: every package-level constant, each of
// which must be a protowire.Number written as a literal.
func fieldConstants(t *testing.T) map[string]protowire.Number {
	consts := map[string]protowire.Number{}
	for _, f := range parseSource(t) {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				typ := exprString(vs.Type)
				for i, name := range vs.Names {
					if typ != "protowire.Number" || i >= len(vs.Values) {
						t.Fatalf("constant %s: a constant of this package is a field number, written `Name protowire.Number = N`", name.Name)
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					n, err := strconv.ParseInt(litValue(lit, ok), 0, 32)
					if err != nil {
						t.Fatalf("constant %s: write the field number as an integer literal", name.Name)
					}
					consts[name.Name] = protowire.Number(n)
				}
			}
		}
	}
	return consts
}

// exprString is e as written, for the expressions the checks look at.
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.BasicLit:
		return e.Value
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case nil:
		return "no type"
	}
	return fmt.Sprintf("%T", e)
}

func litValue(lit *ast.BasicLit, ok bool) string {
	if !ok || lit.Kind != token.INT {
		return ""
	}
	return lit.Value
}

// TestNoLiteralFieldNumbers: the code names every field number by its constant, so
// that TestFieldNumbers sees them all. It checks the places a field number goes: the
// field of protowire.AppendTag, and what a tag's number (named num by every reader)
// is compared with. A helper that writes a field of any number takes it as a
// parameter `field protowire.Number`: inside it, AppendTag may be given field, and
// every call of it must be given a constant there.
func TestNoLiteralFieldNumbers(t *testing.T) {
	consts := fieldConstants(t)
	fset := token.NewFileSet()
	files := parseSourceIn(t, fset)
	helpers := fieldHelpers(files) // name -> index of its field parameter
	inHelper := false
	named := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		_, known := consts[identName(id, ok)]
		return known || inHelper && identName(id, ok) == "field"
	}
	isNum := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		return identName(id, ok) == "num"
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			_, inHelper = helpers[funcName(fd, ok)]
			checkFieldNumbers(t, fset, decl, named, isNum, helpers, consts)
		}
	}
}

// fieldHelpers are the package's functions with a parameter `field protowire.Number`,
// by name, with that parameter's index.
func fieldHelpers(files []*ast.File) map[string]int {
	helpers := map[string]int{}
	for _, f := range files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			i := 0
			for _, p := range fd.Type.Params.List {
				for _, name := range p.Names {
					if name.Name == "field" && exprString(p.Type) == "protowire.Number" {
						helpers[fd.Name.Name] = i
					}
					i++
				}
			}
		}
	}
	return helpers
}

func funcName(fd *ast.FuncDecl, ok bool) string {
	if !ok {
		return ""
	}
	return fd.Name.Name
}

func checkFieldNumbers(t *testing.T, fset *token.FileSet, decl ast.Decl, named, isNum func(ast.Expr) bool,
	helpers map[string]int, consts map[string]protowire.Number) {
	t.Helper()
	ast.Inspect(decl, func(n ast.Node) bool {
		var bad ast.Expr
		switch n := n.(type) {
		case *ast.CallExpr:
			if exprString(n.Fun) == "protowire.AppendTag" && !named(n.Args[1]) {
				bad = n.Args[1]
			}
			if i, ok := helpers[exprString(n.Fun)]; ok {
				id, isIdent := n.Args[i].(*ast.Ident)
				if _, known := consts[identName(id, isIdent)]; !known {
					bad = n.Args[i]
				}
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && isNum(n.X) && !named(n.Y) {
				bad = n.Y
			}
			if (n.Op == token.EQL || n.Op == token.NEQ) && isNum(n.Y) && !named(n.X) {
				bad = n.X
			}
		case *ast.SwitchStmt:
			if n.Tag != nil && isNum(n.Tag) {
				for _, c := range n.Body.List {
					for _, e := range c.(*ast.CaseClause).List {
						if !named(e) {
							bad = e
						}
					}
				}
			}
		}
		if bad != nil {
			t.Errorf("%s: field number %s is not one of the package's constants", fset.Position(bad.Pos()), exprString(bad))
		}
		return true
	})
}

func identName(id *ast.Ident, ok bool) string {
	if !ok {
		return ""
	}
	return id.Name
}

func parseSource(t *testing.T) []*ast.File { return parseSourceIn(t, token.NewFileSet()) }

// parseSourceIn parses the package's Go files, tests left out.
func parseSourceIn(t *testing.T, fset *token.FileSet) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no source files")
	}
	return files
}

// descriptors are the generated descriptors of fanout.v1 and of the well-known types
// it uses, in a registry of their own.
func descriptors(t *testing.T) *protoregistry.Files {
	t.Helper()
	files := new(protoregistry.Files)
	for _, fd := range []protoreflect.FileDescriptor{
		durationpb.File_google_protobuf_duration_proto,
		timestamppb.File_google_protobuf_timestamp_proto,
		fanoutv1.File_fanout_v1_fanout_proto,
		fanoutv1.File_fanout_v1_peer_proto,
	} {
		if err := files.RegisterFile(fd); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// findField looks a field up as Messages().ByName(...).Fields().ByName(...) would,
// nested messages (a map's entry) included.
func findField(t *testing.T, files *protoregistry.Files, name protoreflect.FullName) protoreflect.FieldDescriptor {
	t.Helper()
	d, err := files.FindDescriptorByName(name.Parent())
	if err != nil {
		t.Fatalf("message %s: %v", name.Parent(), err)
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		t.Fatalf("%s is not a message", name.Parent())
	}
	fd := md.Fields().ByName(name.Name())
	if fd == nil {
		t.Fatalf("message %s has no field %s", md.FullName(), name.Name())
	}
	return fd
}

// describe is a field's type as the .proto says it: int64, string,
// google.protobuf.Duration, repeated fanout.v1.Event, packed int64, map<string, string>.
func describe(fd protoreflect.FieldDescriptor) string {
	if fd.IsMap() {
		return fmt.Sprintf("map<%s, %s>", describe(fd.MapKey()), describe(fd.MapValue()))
	}
	typ := fd.Kind().String()
	if md := fd.Message(); md != nil {
		typ = string(md.FullName())
	}
	switch {
	case fd.IsPacked():
		return "packed " + typ
	case fd.IsList():
		return "repeated " + typ
	}
	return typ
}

// wireType is how one occurrence of the field is encoded: a packed list as one
// length-delimited field.
func wireType(fd protoreflect.FieldDescriptor) protowire.Type {
	if fd.IsPacked() {
		return protowire.BytesType
	}
	switch fd.Kind() {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Int64Kind,
		protoreflect.Sint32Kind, protoreflect.Sint64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.BytesType // string, bytes, message
}
