package reservation_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// entry builds one annotation object from raw member text, so that a test
// can replace exactly one member.
func entry(members ...string) string { return "{" + strings.Join(members, ",") + "}" }

var (
	mContainer = `"containerIndex":0`
	mDevice    = `"deviceIndex":0`
	mGPU       = `"gpuUUID":"GPU-a"`
	mProfile   = `"profile":"1g.5gb"`
	mPlacement = `"placement":{"start":0,"size":1}`
	validEntry = entry(mContainer, mDevice, mGPU, mProfile, mPlacement)
)

// with returns the valid entry with its member named key replaced by
// member (or dropped when member is empty).
func with(key, member string) string {
	members := []string{mContainer, mDevice, mGPU, mProfile, mPlacement}
	out := members[:0:0]
	for _, m := range members {
		if strings.HasPrefix(m, `"`+key+`"`) {
			if member != "" {
				out = append(out, member)
			}
			continue
		}
		out = append(out, m)
	}
	return entry(out...)
}

func arr(entries ...string) string { return "[" + strings.Join(entries, ",") + "]" }

func TestDecodeRejectsMalformed(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantKind  error
		wantIndex int
		wantField string
	}{
		{name: "top-level object", in: `{}`, wantKind: reservation.ErrType, wantIndex: -1},
		{name: "top-level null", in: `null`, wantKind: reservation.ErrType, wantIndex: -1},
		{name: "top-level string", in: `"[]"`, wantKind: reservation.ErrType, wantIndex: -1},
		{name: "top-level number", in: `42`, wantKind: reservation.ErrType, wantIndex: -1},
		{name: "top-level bool", in: `true`, wantKind: reservation.ErrType, wantIndex: -1},
		{name: "white space only", in: " \n", wantKind: reservation.ErrSyntax, wantIndex: -1},
		{name: "garbage", in: `x`, wantKind: reservation.ErrSyntax, wantIndex: -1},
		{name: "byte order mark", in: "\xef\xbb\xbf[]", wantKind: reservation.ErrSyntax, wantIndex: -1},
		{name: "unterminated array", in: `[`, wantKind: reservation.ErrSyntax, wantIndex: 0},
		{name: "unterminated after entry", in: `[` + validEntry, wantKind: reservation.ErrSyntax, wantIndex: -1},
		{name: "trailing comma in array", in: `[` + validEntry + `,]`, wantKind: reservation.ErrSyntax, wantIndex: 1},
		{name: "missing comma between entries", in: `[` + validEntry + validEntry + `]`, wantKind: reservation.ErrSyntax, wantIndex: -1},
		{name: "trailing garbage", in: arr(validEntry) + `x`, wantKind: reservation.ErrTrailingData, wantIndex: -1},
		{name: "two arrays", in: arr(validEntry) + `[]`, wantKind: reservation.ErrTrailingData, wantIndex: -1},
		{name: "trailing NUL", in: "[]\x00", wantKind: reservation.ErrTrailingData, wantIndex: -1},
		{name: "entry is number", in: `[1]`, wantKind: reservation.ErrType, wantIndex: 0},
		{name: "entry is null", in: `[null]`, wantKind: reservation.ErrType, wantIndex: 0},
		{name: "entry is array", in: `[[]]`, wantKind: reservation.ErrType, wantIndex: 0},
		{name: "entry is string", in: `["x"]`, wantKind: reservation.ErrType, wantIndex: 0},
		{name: "second entry bad", in: arr(validEntry, with("containerIndex", `"containerIndex":"1"`)), wantKind: reservation.ErrType, wantIndex: 1, wantField: "containerIndex"},
		{name: "containerIndex string", in: arr(with("containerIndex", `"containerIndex":"0"`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex null", in: arr(with("containerIndex", `"containerIndex":null`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex bool", in: arr(with("containerIndex", `"containerIndex":true`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex object", in: arr(with("containerIndex", `"containerIndex":{}`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex negative", in: arr(with("containerIndex", `"containerIndex":-1`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex negative zero", in: arr(with("containerIndex", `"containerIndex":-0`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex fraction", in: arr(with("containerIndex", `"containerIndex":1.5`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex integral fraction", in: arr(with("containerIndex", `"containerIndex":1.0`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex exponent", in: arr(with("containerIndex", `"containerIndex":1e2`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex above int32", in: arr(with("containerIndex", `"containerIndex":2147483648`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex huge", in: arr(with("containerIndex", `"containerIndex":123456789012345678901234567890`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex leading zero", in: arr(with("containerIndex", `"containerIndex":01`)), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex plus sign", in: arr(with("containerIndex", `"containerIndex":+1`)), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex bare minus", in: arr(with("containerIndex", `"containerIndex":-`)), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex NaN", in: arr(with("containerIndex", `"containerIndex":NaN`)), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "containerIndex"},
		{name: "containerIndex dangling dot", in: arr(with("containerIndex", `"containerIndex":1.`)), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "containerIndex"},
		{name: "deviceIndex negative", in: arr(with("deviceIndex", `"deviceIndex":-3`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "deviceIndex"},
		{name: "deviceIndex float", in: arr(with("deviceIndex", `"deviceIndex":0.5`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "deviceIndex"},
		{name: "gpuUUID number", in: arr(with("gpuUUID", `"gpuUUID":5`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "gpuUUID"},
		{name: "gpuUUID null", in: arr(with("gpuUUID", `"gpuUUID":null`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "gpuUUID"},
		{name: "gpuUUID bad escape", in: arr(with("gpuUUID", `"gpuUUID":"GPU-\x"`)), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "gpuUUID"},
		{name: "gpuUUID short unicode escape", in: arr(with("gpuUUID", `"gpuUUID":"GPU-\u12G4"`)), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "gpuUUID"},
		{name: "gpuUUID control character", in: arr(with("gpuUUID", "\"gpuUUID\":\"GPU-\x01\"")), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "gpuUUID"},
		{name: "gpuUUID raw newline", in: arr(with("gpuUUID", "\"gpuUUID\":\"GPU-\n\"")), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "gpuUUID"},
		{name: "gpuUUID invalid UTF-8", in: arr(with("gpuUUID", "\"gpuUUID\":\"GPU-\xff\"")), wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "gpuUUID"},
		{name: "gpuUUID unterminated", in: `[{"gpuUUID":"GPU-a`, wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "gpuUUID"},
		{name: "profile array", in: arr(with("profile", `"profile":["1g.5gb"]`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "profile"},
		{name: "placement array", in: arr(with("placement", `"placement":[0,1]`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "placement"},
		{name: "placement string", in: arr(with("placement", `"placement":"0:1"`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "placement"},
		{name: "placement null", in: arr(with("placement", `"placement":null`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "placement"},
		{name: "placement start negative", in: arr(with("placement", `"placement":{"start":-1,"size":1}`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "placement.start"},
		{name: "placement size above uint32", in: arr(with("placement", `"placement":{"start":0,"size":4294967296}`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "placement.size"},
		{name: "placement size string", in: arr(with("placement", `"placement":{"start":0,"size":"1"}`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "placement.size"},
		{name: "placement size missing", in: arr(with("placement", `"placement":{"start":0}`)), wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "placement.size"},
		{name: "placement start missing", in: arr(with("placement", `"placement":{"size":1}`)), wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "placement.start"},
		{name: "placement empty", in: arr(with("placement", `"placement":{}`)), wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "placement.start"},
		{name: "placement unknown key", in: arr(with("placement", `"placement":{"start":0,"size":1,"end":1}`)), wantKind: reservation.ErrUnknownKey, wantIndex: 0, wantField: "placement.end"},
		{name: "placement duplicate start", in: arr(with("placement", `"placement":{"start":0,"start":2,"size":1}`)), wantKind: reservation.ErrDuplicateKey, wantIndex: 0, wantField: "placement.start"},
		{name: "placement case variant", in: arr(with("placement", `"placement":{"Start":0,"size":1}`)), wantKind: reservation.ErrUnknownKey, wantIndex: 0, wantField: "placement.Start"},
		{name: "gpuInstanceID negative", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"gpuInstanceID":-1`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "gpuInstanceID"},
		{name: "gpuInstanceID above uint32", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"gpuInstanceID":4294967296`)), wantKind: reservation.ErrRange, wantIndex: 0, wantField: "gpuInstanceID"},
		{name: "gpuInstanceID null", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"gpuInstanceID":null`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "gpuInstanceID"},
		{name: "computeInstanceID string", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"computeInstanceID":"0"`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "computeInstanceID"},
		{name: "migUUID number", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"migUUID":1`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "migUUID"},
		{name: "migUUID null", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"migUUID":null`)), wantKind: reservation.ErrType, wantIndex: 0, wantField: "migUUID"},
		{name: "duplicate containerIndex", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"containerIndex":1`)), wantKind: reservation.ErrDuplicateKey, wantIndex: 0, wantField: "containerIndex"},
		{name: "duplicate migUUID", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"migUUID":"a"`, `"migUUID":"b"`)), wantKind: reservation.ErrDuplicateKey, wantIndex: 0, wantField: "migUUID"},
		{name: "duplicate key via escape", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"\u0070rofile":"2g.10gb"`)), wantKind: reservation.ErrDuplicateKey, wantIndex: 0, wantField: "profile"},
		{name: "unknown key", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"extra":1`)), wantKind: reservation.ErrUnknownKey, wantIndex: 0, wantField: "extra"},
		{name: "case variant key", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"MigUUID":"x"`)), wantKind: reservation.ErrUnknownKey, wantIndex: 0, wantField: "MigUUID"},
		{name: "missing containerIndex", in: arr(with("containerIndex", "")), wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "containerIndex"},
		{name: "missing deviceIndex", in: arr(with("deviceIndex", "")), wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "deviceIndex"},
		{name: "missing gpuUUID", in: arr(with("gpuUUID", "")), wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "gpuUUID"},
		{name: "missing profile", in: arr(with("profile", "")), wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "profile"},
		{name: "missing placement", in: arr(with("placement", "")), wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "placement"},
		{name: "empty object", in: `[{}]`, wantKind: reservation.ErrMissingField, wantIndex: 0, wantField: "containerIndex"},
		{name: "missing colon", in: `[{"containerIndex" 0}]`, wantKind: reservation.ErrSyntax, wantIndex: 0, wantField: "containerIndex"},
		{name: "missing comma between members", in: `[{"containerIndex":0 "deviceIndex":0}]`, wantKind: reservation.ErrSyntax, wantIndex: 0},
		{name: "trailing comma in object", in: `[{"containerIndex":0,}]`, wantKind: reservation.ErrSyntax, wantIndex: 0},
		{name: "single quotes", in: `[{'containerIndex':0}]`, wantKind: reservation.ErrSyntax, wantIndex: 0},
		{name: "unquoted key", in: `[{containerIndex:0}]`, wantKind: reservation.ErrSyntax, wantIndex: 0},
		{name: "comment", in: `[/* none */]`, wantKind: reservation.ErrSyntax, wantIndex: 0},
		{name: "unterminated object", in: `[{"containerIndex":0`, wantKind: reservation.ErrSyntax, wantIndex: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := reservation.Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("Decode(%q) = %+v, want error", tt.in, got)
			}
			if !errors.Is(err, reservation.ErrMalformed) || !errors.Is(err, tt.wantKind) {
				t.Fatalf("Decode(%q) error = %v, want ErrMalformed and %v", tt.in, err, tt.wantKind)
			}
			var de *reservation.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T is not a *DecodeError", err)
			}
			if de.Index != tt.wantIndex || de.Field != tt.wantField {
				t.Errorf("index, field = %d, %q, want %d, %q (%v)", de.Index, de.Field, tt.wantIndex, tt.wantField, err)
			}
			if de.Offset < 0 || de.Offset > len(tt.in) {
				t.Errorf("offset = %d, want within [0,%d]", de.Offset, len(tt.in))
			}
			if got != nil {
				t.Errorf("allocations = %+v, want nil on error", got)
			}
			// The string entry point must agree.
			if _, err2 := reservation.DecodeString(tt.in); !errors.Is(err2, tt.wantKind) {
				t.Errorf("DecodeString error = %v, want %v", err2, tt.wantKind)
			}
		})
	}
	if len(tests) < 40 {
		t.Fatalf("only %d malformed cases, want at least 40", len(tests))
	}
}

func TestDecodeAllowUnknownKeys(t *testing.T) {
	opts := reservation.DecodeOptions{AllowUnknownKeys: true}
	in := arr(entry(`"future":{"a":[1,2.5e3,true,false,null,"x\u00e9"]}`, mContainer, mDevice, mGPU, mProfile,
		`"placement":{"start":0,"hint":"low","size":1}`, `"note":-0.5`))
	got, err := reservation.DecodeWithOptions([]byte(in), opts)
	if err != nil {
		t.Fatalf("DecodeWithOptions: %v", err)
	}
	want := reservation.Allocation{GPUUUID: "GPU-a", Profile: "1g.5gb", Placement: capability.Placement{Size: 1}}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("got %+v, want [%+v]", got, want)
	}

	for _, tt := range []struct {
		name     string
		in       string
		wantKind error
	}{
		{name: "case variant still refused", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"ContainerIndex":3`)), wantKind: reservation.ErrUnknownKey},
		{name: "unknown value must be valid JSON", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"x":[1,]`)), wantKind: reservation.ErrSyntax},
		{name: "trailing comma after an unknown placement key", in: arr(entry(mContainer, mDevice, mGPU, mProfile, `"placement":{"start":0,"size":1,"x":1,}`)), wantKind: reservation.ErrSyntax},
		{name: "only an unknown placement key", in: arr(entry(mContainer, mDevice, mGPU, mProfile, `"placement":{"x":1}`)), wantKind: reservation.ErrMissingField},
		{name: "unknown bad literal", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"x":tru`)), wantKind: reservation.ErrSyntax},
		{name: "unknown too deep", in: arr(entry(mContainer, mDevice, mGPU, mProfile, mPlacement, `"x":`+strings.Repeat("[", 1000)+strings.Repeat("]", 1000))), wantKind: reservation.ErrSyntax},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := reservation.DecodeWithOptions([]byte(tt.in), opts); !errors.Is(err, tt.wantKind) {
				t.Fatalf("error = %v, want %v", err, tt.wantKind)
			}
		})
	}
}

func TestDecodeEmpty(t *testing.T) {
	got, err := reservation.Decode(nil)
	if err != nil || got != nil {
		t.Fatalf("Decode(empty) = %v, %v, want nil, nil", got, err)
	}
	got, err = reservation.DecodeString(" [ ] ")
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("Decode(\"[]\") = %#v, %v, want empty non-nil", got, err)
	}
}

func TestDecodeStrings(t *testing.T) {
	tests := []struct {
		name string
		raw  string // JSON string literal, without quotes
		want string
	}{
		{name: "plain", raw: `GPU-a`, want: "GPU-a"},
		{name: "short escapes", raw: `a\"\\\/\b\f\n\r\t`, want: "a\"\\/\b\f\n\r\t"},
		{name: "BMP escape", raw: `\u00e9\u4e2D`, want: "é中"},
		{name: "surrogate pair", raw: `\ud83d\ude00`, want: "😀"},
		{name: "lone high surrogate", raw: `\ud83dx`, want: "\ufffdx"},
		{name: "lone low surrogate", raw: `\ude00`, want: "\ufffd"},
		{name: "high then non-surrogate escape", raw: `\ud83d\u0041`, want: "\ufffdA"},
		{name: "two high surrogates", raw: `\ud83d\ud83d\ude00`, want: "\ufffd😀"},
		{name: "raw UTF-8", raw: "é😀", want: "é😀"},
		{name: "escaped NUL", raw: `\u0000`, want: "\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := arr(with("gpuUUID", `"gpuUUID":"`+tt.raw+`"`))
			for _, decode := range []func(string) ([]reservation.Allocation, error){
				reservation.DecodeString,
				func(s string) ([]reservation.Allocation, error) { return reservation.Decode([]byte(s)) },
			} {
				got, err := decode(in)
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if got[0].GPUUUID != tt.want {
					t.Errorf("gpuUUID = %q, want %q", got[0].GPUUUID, tt.want)
				}
			}
		})
	}
}

func TestDecodeDoesNotAliasByteInput(t *testing.T) {
	in := []byte(arr(validEntry))
	got, err := reservation.Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 'X'
	}
	if got[0].GPUUUID != "GPU-a" || got[0].Profile != "1g.5gb" {
		t.Fatalf("decoded strings changed with the input: %+v", got[0])
	}
}

func TestDecodeKeyOrderAndWhitespaceFree(t *testing.T) {
	in := " [ {\"placement\" : { \"size\" : 2 , \"start\" : 4 } ,\n\t\"computeInstanceID\":0,\"gpuInstanceID\":0,\"migUUID\":\"MIG-x\",\"profile\":\"2g.10gb\",\"gpuUUID\":\"GPU-a\",\"deviceIndex\":1,\"containerIndex\":2 } ] \r\n"
	got, err := reservation.DecodeString(in)
	if err != nil {
		t.Fatal(err)
	}
	want := reservation.Allocation{ContainerIndex: 2, DeviceIndex: 1, GPUUUID: "GPU-a", Profile: "2g.10gb",
		Placement: capability.Placement{Start: 4, Size: 2}, MIGUUID: "MIG-x",
		GPUInstanceID: reservation.SomeID(0), ComputeInstanceID: reservation.SomeID(0)}
	if got[0] != want {
		t.Fatalf("got %+v, want %+v", got[0], want)
	}
	const canonical = `[{"containerIndex":2,"deviceIndex":1,"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":4,"size":2},"migUUID":"MIG-x","gpuInstanceID":0,"computeInstanceID":0}]`
	if enc := reservation.EncodeString(got); enc != canonical {
		t.Fatalf("Encode = %s, want %s", enc, canonical)
	}
}

func TestDecodeLimits(t *testing.T) {
	in := arr(entry(`"containerIndex":2147483647`, mDevice, mGPU, mProfile,
		`"placement":{"start":4294967295,"size":4294967295}`, `"migUUID":"MIG-x"`,
		`"gpuInstanceID":4294967295`, `"computeInstanceID":4294967295`))
	got, err := reservation.DecodeString(in)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].ContainerIndex != 2147483647 || got[0].Placement.Start != 4294967295 || got[0].ComputeInstanceID.ID != 4294967295 {
		t.Fatalf("got %+v", got[0])
	}
	if enc := reservation.EncodeString(got); enc != in {
		t.Fatalf("Encode = %s, want %s", enc, in)
	}
}
