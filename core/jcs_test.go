package idem

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// TestAppendESRFC8785 checks the number serialization against the samples
// of RFC 8785, Appendix B (IEEE 754 bits, expected JSON number).
func TestAppendESRFC8785(t *testing.T) {
	for _, tc := range []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // minus zero
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
		// The samples of the es6testfile README.
		{0x4340000000000001, "9007199254740994"},
		{0x4340000000000002, "9007199254740996"},
	} {
		if got := string(appendES(nil, math.Float64frombits(tc.bits))); got != tc.want {
			t.Errorf("%016x: %s, want %s", tc.bits, got, tc.want)
		}
	}
}

// TestCanonicalJSONRFC8785 is the example of RFC 8785, section 3.2.2, and
// the sorting example of section 3.2.3.
func TestCanonicalJSONRFC8785(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`, "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
	} {
		got, err := CanonicalJSON([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("CanonicalJSON:\n got %s, %v\nwant %s", got, err, tc.want)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"whitespace", " {\n\t\"a\" : [ 1 , 2 ] }\r\n", `{"a":[1,2]}`},
		{"member order", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"nested order", `{"z":{"y":1,"x":[{"b":0,"a":0}]}}`, `{"z":{"x":[{"a":0,"b":0}],"y":1}}`},
		{"1.0", `1.0`, `1`},
		{"1e0", `1e0`, `1`},
		{"10E-1", `10E-1`, `1`},
		{"minus zero", `-0.0`, `0`},
		{"2^53+1 rounds", `9007199254740993`, `9007199254740992`},
		{"big", `1e21`, `1e+21`},
		{"tiny underflows", `1e-400`, `0`},
		{"escaped names", `{"\u0061":1}`, `{"a":1}`},
		{"solidus", `"\/"`, `"/"`},
		{"control", `"\u001f\u0000\b"`, `"\u001f\u0000\b"`},
		{"DEL and U+2028 stay", `"\u007f\u2028"`, "\"\x7f\u2028\""},
		{"surrogate pair", `"\uD83D\uDE00"`, `"😀"`},
		{"literals", `[true,false,null]`, `[true,false,null]`},
		{"empty", `[{},[],""]`, `[{},[],""]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CanonicalJSON([]byte(tc.in))
			if err != nil || string(got) != tc.want {
				t.Errorf("got %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestCanonicalJSONRejects(t *testing.T) {
	for _, tc := range []struct{ name, in, why string }{
		{"empty", ``, "end of input"},
		{"duplicate", `{"a":1,"a":2}`, `"a" twice`},
		{"duplicate after unescaping", `{"a":1,"\u0061":2}`, `"a" twice`},
		{"nested duplicate", `[{"x":{"k":1,"k":1}}]`, "twice"},
		{"trailing comma", `[1,]`, "want a value"},
		{"trailing data", `{} {}`, "after the value"},
		{"leading zero", `01`, "after the value"},
		{"bare dot", `1.`, "decimal point"},
		{"plus", `+1`, "want a value"},
		{"infinity", `1e400`, "range of a double"},
		{"NaN", `NaN`, "want a value"},
		{"single quotes", `{'a':1}`, "member name"},
		{"raw control", "\"a\tb\"", "control character"},
		{"invalid UTF-8", "\"\xff\"", "UTF-8"},
		{"lone high surrogate", `"\ud800"`, "surrogate"},
		{"lone low surrogate", `"\udc00x"`, "surrogate"},
		{"bad escape", `"\x"`, "escape"},
		{"short unicode escape", `"\u12"`, "four hex"},
		{"unclosed", `{"a":"b`, "closing quote"},
		{"BOM", "\xef\xbb\xbf{}", "want a value"},
		{"too deep", strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1), "deeper"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CanonicalJSON([]byte(tc.in))
			if !errors.Is(err, ErrInvalidJSON) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("err %v, want ErrInvalidJSON saying %q", err, tc.why)
			}
		})
	}
	deep := strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth)
	if _, err := CanonicalJSON([]byte(deep)); err != nil {
		t.Errorf("%d levels: %v", MaxJSONDepth, err)
	}
}

func TestCompareUTF16(t *testing.T) {
	// U+FB33 sorts after U+1F600 in UTF-16 (0xFB33 > 0xD83D) although it
	// is the smaller code point.
	for _, tc := range []struct {
		a, b string
		less bool
	}{
		{"a", "b", true},
		{"a", "ab", true},
		{"😀", "\ufb33", true},
		{"\ufb33", "😀", false},
		{"\u00f6", "\u20ac", true},
		{"😀", "😁", true},
	} {
		if got := compareUTF16([]byte(tc.a), []byte(tc.b)) < 0; got != tc.less {
			t.Errorf("compareUTF16(%q, %q) < 0 = %v", tc.a, tc.b, got)
		}
	}
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":[1,2.50,1e30],"a":"\u20ac\n"}`, `[null,true,false,{}]`, `"\ud83d\ude00"`, `-0.000001e-3`, `{"a":{"a":{"a":[]}}}`, `1e21`, `{"a":1,"a":2}`, `-0`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := CanonicalJSON(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidJSON) {
				t.Fatalf("error %v does not wrap ErrInvalidJSON", err)
			}
			return
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q of %q is not valid JSON", c, b)
		}
		if !json.Valid(b) {
			t.Fatalf("accepted %q, which encoding/json rejects", b)
		}
		c2, err := CanonicalJSON(c)
		if err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("canonicalizing twice: %q then %q, %v", c, c2, err)
		}
		var v1, v2 any
		if json.Unmarshal(b, &v1) != nil || json.Unmarshal(c, &v2) != nil {
			t.Fatal("encoding/json cannot read the input or its canonical form")
		}
		if !reflect.DeepEqual(v1, v2) { // 0 == -0
			t.Fatalf("the canonical form %q means something else than %q", c, b)
		}
	})
}
