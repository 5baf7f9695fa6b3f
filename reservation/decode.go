package reservation

import (
	"bytes"
	"math"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dynmig/dynmig/capability"
)

// DecodeOptions tunes [DecodeWithOptions]. The zero value is strict and is
// what [Decode] uses.
type DecodeOptions struct {
	// AllowUnknownKeys skips keys the format does not define (their values
	// must still be valid JSON) instead of failing with [ErrUnknownKey]. A
	// key that differs from a known key only in letter case, such as
	// "ContainerIndex", is rejected even then: encoding/json based readers,
	// the deployed ones included, would take it as the known field, so
	// accepting it would let two readers see different reservations.
	AllowUnknownKeys bool
}

// Limits of the format.
const (
	// MaxIndex is the largest containerIndex or deviceIndex Decode accepts.
	MaxIndex = math.MaxInt32
	// maxDepth bounds nesting inside skipped unknown values.
	maxDepth = 512
)

// Decode parses an hami.io/vgpu-mig-allocations annotation value strictly:
// see [DecodeWithOptions].
func Decode(data []byte) ([]Allocation, error) {
	return decode(data, DecodeOptions{})
}

// DecodeString is [Decode] for an annotation value held as a string, the
// way Kubernetes hands annotations out. Decoded strings share memory with
// value instead of being copied.
func DecodeString(value string) ([]Allocation, error) {
	return decode(value, DecodeOptions{})
}

// DecodeWithOptions parses an annotation value.
//
// An empty value means no allocations and returns (nil, nil); "[]" returns
// an empty, non-nil slice. Otherwise the value must be exactly one JSON
// array of objects, optionally surrounded by white space, each object
// holding the keys the wire format defines. Decode checks syntax, JSON
// types and number ranges only; semantic rules (empty UUIDs, size 0,
// duplicates, partial runtime identity, overlaps) are [Validate]'s.
//
// It is stricter than encoding/json, on purpose: it rejects duplicate keys,
// unknown keys (unless opts allows them), keys matching a known key only
// case-insensitively, null anywhere, numbers with a minus sign, fraction or
// exponent, missing scheduler-written keys, invalid UTF-8 and trailing data.
// Where both accept an input they decode the same values; like
// encoding/json a lone UTF-16 surrogate escape becomes U+FFFD.
//
// Every error is a [*DecodeError] matching [ErrMalformed]. Decode stops at
// the first problem and never panics.
func DecodeWithOptions(data []byte, opts DecodeOptions) ([]Allocation, error) {
	return decode(data, opts)
}

// DecodeStringWithOptions is [DecodeWithOptions] for a string value.
func DecodeStringWithOptions(value string, opts DecodeOptions) ([]Allocation, error) {
	return decode(value, opts)
}

type input interface{ ~string | ~[]byte }

// decoder is a hand-written scanner for the one shape the annotation has.
// It is generic so that string input is scanned without a copy and its
// decoded strings are substrings of it.
type decoder[T input] struct {
	data T
	pos  int
	opts DecodeOptions
	// scratch holds unescaped string bytes; reused across strings.
	scratch []byte
}

// key bits, also the order of the wire keys.
const (
	keyContainerIndex = 1 << iota
	keyDeviceIndex
	keyGPUUUID
	keyProfile
	keyPlacement
	keyMIGUUID
	keyGPUInstanceID
	keyComputeInstanceID

	keysRequired = keyContainerIndex | keyDeviceIndex | keyGPUUUID | keyProfile | keyPlacement
)

var wireKeys = [...]string{
	"containerIndex", "deviceIndex", "gpuUUID", "profile", "placement",
	"migUUID", "gpuInstanceID", "computeInstanceID",
}

func decode[T input](data T, opts DecodeOptions) ([]Allocation, error) {
	if len(data) == 0 {
		return nil, nil
	}
	d := decoder[T]{data: data, opts: opts}
	allocs, err := d.array()
	if err != nil {
		return nil, err
	}
	return allocs, nil
}

func (d *decoder[T]) fail(index int, field string, kind error, reason string) error {
	return &DecodeError{Index: index, Field: field, Offset: d.pos, Kind: kind, Reason: reason}
}

func (d *decoder[T]) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (d *decoder[T]) peek() byte {
	d.skipSpace()
	if d.pos < len(d.data) {
		return d.data[d.pos]
	}
	return 0
}

// unexpected builds the error for byte c where something else was wanted:
// a value of another JSON type is ErrType, anything else ErrSyntax.
func (d *decoder[T]) unexpected(index int, field string, c byte, want string) error {
	if c == 0 && d.pos >= len(d.data) {
		return d.fail(index, field, ErrSyntax, "unexpected end of input, want "+want)
	}
	if startsValue(c) {
		return d.fail(index, field, ErrType, "found "+valueKind(c)+", want "+want)
	}
	return d.fail(index, field, ErrSyntax, "invalid character "+quoteByte(c)+", want "+want)
}

// unexpectedPunct builds the error for byte c where punctuation was
// wanted: always a syntax error.
func (d *decoder[T]) unexpectedPunct(index int, field string, c byte, want string) error {
	if c == 0 && d.pos >= len(d.data) {
		return d.fail(index, field, ErrSyntax, "unexpected end of input, want "+want)
	}
	return d.fail(index, field, ErrSyntax, "invalid character "+quoteByte(c)+", want "+want)
}

func startsValue(c byte) bool {
	switch c {
	case '{', '[', '"', 't', 'f', 'n', '-':
		return true
	}
	return c >= '0' && c <= '9'
}

func valueKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func quoteByte(c byte) string {
	const hex = "0123456789abcdef"
	if c >= 0x20 && c < 0x7f && c != '\'' {
		return "'" + string(rune(c)) + "'"
	}
	return "0x" + string([]byte{hex[c>>4], hex[c&15]})
}

func (d *decoder[T]) array() ([]Allocation, error) {
	if c := d.peek(); c != '[' {
		return nil, d.unexpected(-1, "", c, "an array")
	}
	d.pos++
	allocs := make([]Allocation, 0, estimateEntries(d.data))
	if d.peek() == ']' {
		d.pos++
		return allocs, d.end()
	}
	for {
		a, err := d.entry(len(allocs), allocs)
		if err != nil {
			return nil, err
		}
		allocs = append(allocs, a)
		switch c := d.peek(); c {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return allocs, d.end()
		default:
			return nil, d.unexpectedPunct(-1, "", c, "',' or ']' after an array entry")
		}
	}
}

// estimateEntries guesses the entry count from the number of '{' (two per
// entry: the entry and its placement) so the result is allocated once. The
// guess is capped by the input length (an entry takes at least 64 bytes),
// so that a flood of braces cannot make Decode allocate far more than the
// input's size.
func estimateEntries[T input](data T) int {
	var n int
	switch v := any(data).(type) {
	case string:
		n = strings.Count(v, "{")
	case []byte:
		n = bytes.Count(v, []byte{'{'})
	}
	return min((n+1)/2, len(data)/64+1)
}

func (d *decoder[T]) end() error {
	d.skipSpace()
	if d.pos != len(d.data) {
		return d.fail(-1, "", ErrTrailingData, "data after the closing ']'")
	}
	return nil
}

func (d *decoder[T]) entry(index int, prev []Allocation) (Allocation, error) {
	var a Allocation
	if c := d.peek(); c != '{' {
		return a, d.unexpected(index, "", c, "an object")
	}
	d.pos++
	var last Allocation
	if len(prev) > 0 {
		last = prev[len(prev)-1]
	}
	var seen uint
	if d.peek() == '}' {
		d.pos++
		return a, d.missing(index, seen)
	}
	for {
		bit, name, err := d.member(index, "", &seen)
		if err != nil {
			return a, err
		}
		if err := d.field(index, bit, name, &a, &last); err != nil {
			return a, err
		}
		switch c := d.peek(); c {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return a, d.missing(index, seen)
		default:
			return a, d.unexpectedPunct(index, "", c, "',' or '}' after an object member")
		}
	}
}

// field reads the value of the entry member whose key is bit (name) into
// a; last is the previous entry, whose GPU UUID and profile strings a
// repeats instead of keeping a new copy. A tolerated unknown key (bit 0)
// has its value skipped.
func (d *decoder[T]) field(index int, bit uint, name string, a, last *Allocation) error {
	switch bit {
	case keyContainerIndex, keyDeviceIndex:
		v, err := d.uint(index, name, MaxIndex)
		if bit == keyContainerIndex {
			a.ContainerIndex = int(v)
		} else {
			a.DeviceIndex = int(v)
		}
		return err
	case keyGPUUUID, keyProfile, keyMIGUUID:
		s, err := d.string(index, name)
		if err != nil {
			return err
		}
		switch bit {
		case keyGPUUUID:
			a.GPUUUID = d.intern(s, last.GPUUUID)
		case keyProfile:
			a.Profile = d.intern(s, last.Profile)
		default:
			a.MIGUUID = d.keep(s)
		}
		return nil
	case keyPlacement:
		p, err := d.placement(index)
		a.Placement = p
		return err
	case keyGPUInstanceID, keyComputeInstanceID:
		v, err := d.uint(index, name, math.MaxUint32)
		if err != nil {
			return err
		}
		if bit == keyGPUInstanceID {
			a.GPUInstanceID = SomeID(uint32(v))
		} else {
			a.ComputeInstanceID = SomeID(uint32(v))
		}
		return nil
	}
	return d.skipValue(index, name, 0)
}

func (d *decoder[T]) missing(index int, seen uint) error {
	if seen&keysRequired == keysRequired {
		return nil
	}
	for i, k := range wireKeys {
		if seen&(1<<i) == 0 {
			return d.fail(index, k, ErrMissingField, "required key is absent")
		}
	}
	return nil
}

// member reads one object member's key and the colon after it, refusing a
// key already in seen (a tolerated unknown key has bit 0 and may repeat).
func (d *decoder[T]) member(index int, parent string, seen *uint) (uint, string, error) {
	bit, name, err := d.key(index, parent)
	if err != nil {
		return bit, name, err
	}
	if bit != 0 && *seen&bit != 0 {
		return bit, name, d.fail(index, name, ErrDuplicateKey, "key appears twice")
	}
	*seen |= bit
	return bit, name, d.colon(index, name)
}

func (d *decoder[T]) colon(index int, field string) error {
	if c := d.peek(); c != ':' {
		return d.unexpectedPunct(index, field, c, "':' after an object key")
	}
	d.pos++
	return nil
}

// key reads an object key and classifies it. Inside a placement object
// (parent "placement") the keys are start and size, returned as bits 1
// and 2. Unknown keys return bit 0 when tolerated.
func (d *decoder[T]) key(index int, parent string) (uint, string, error) {
	c := d.peek()
	if c != '"' {
		if c == 0 && d.pos >= len(d.data) {
			return 0, "", d.fail(index, parent, ErrSyntax, "unexpected end of input, want an object key")
		}
		return 0, "", d.fail(index, parent, ErrSyntax, "invalid character "+quoteByte(c)+", want an object key")
	}
	start := d.pos
	raw, err := d.string(index, parent)
	if err != nil {
		return 0, "", err
	}
	known, fields := wireKeys[:], wireKeys[:]
	if parent != "" {
		known, fields = placementKeys[:], placementFields[:]
	}
	for i, k := range known {
		if d.equal(raw, k) {
			return 1 << i, fields[i], nil
		}
	}
	text := strings.Clone(d.keep(raw))
	name := joinField(parent, text)
	for _, k := range known {
		if strings.EqualFold(text, k) {
			d.pos = start
			return 0, name, d.fail(index, name, ErrUnknownKey, "key differs from "+k+" only in letter case")
		}
	}
	if !d.opts.AllowUnknownKeys {
		d.pos = start
		return 0, name, d.fail(index, name, ErrUnknownKey, "key is not part of the format")
	}
	return 0, name, nil
}

var (
	placementKeys   = [...]string{"start", "size"}
	placementFields = [...]string{"placement.start", "placement.size"}
)

func joinField(parent, k string) string {
	if parent == "" {
		return k
	}
	return parent + "." + k
}

// Bits of the placement object's keys, in placementKeys order.
const (
	keyStart uint = 1 << iota
	keySize
)

func (d *decoder[T]) placement(index int) (p capability.Placement, err error) {
	const field = "placement"
	if c := d.peek(); c != '{' {
		return p, d.unexpected(index, field, c, "an object")
	}
	d.pos++
	var seen uint
	for empty := d.peek() == '}'; !empty; {
		bit, name, err := d.member(index, field, &seen)
		if err != nil {
			return p, err
		}
		switch bit {
		case keyStart, keySize:
			v, err := d.uint(index, name, math.MaxUint32)
			if err != nil {
				return p, err
			}
			if bit == keyStart {
				p.Start = uint32(v)
			} else {
				p.Size = uint32(v)
			}
		default:
			if err := d.skipValue(index, name, 1); err != nil {
				return p, err
			}
		}
		c := d.peek()
		if c == '}' {
			break
		}
		if c != ',' {
			return p, d.unexpectedPunct(index, field, c, "',' or '}' after an object member")
		}
		d.pos++
	}
	d.pos++
	if seen&keyStart == 0 {
		return p, d.fail(index, "placement.start", ErrMissingField, "required key is absent")
	}
	if seen&keySize == 0 {
		return p, d.fail(index, "placement.size", ErrMissingField, "required key is absent")
	}
	return p, nil
}

// uint reads a non-negative integer no larger than max. The whole number
// token is checked against the JSON grammar first, so a range error is
// never reported for what is really a syntax error.
func (d *decoder[T]) uint(index int, field string, max uint64) (uint64, error) {
	c := d.peek()
	if c != '-' && (c < '0' || c > '9') {
		return 0, d.unexpected(index, field, c, "a number")
	}
	start := d.pos
	neg := c == '-'
	if neg {
		d.pos++
	}
	var v uint64
	over := false
	digits := 0
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c < '0' || c > '9' {
			break
		}
		if digits == 1 && d.data[d.pos-1] == '0' {
			return 0, d.fail(index, field, ErrSyntax, "number with a leading zero")
		}
		if !over {
			v = v*10 + uint64(c-'0')
			if v > max {
				over = true
			}
		}
		digits++
		d.pos++
	}
	if digits == 0 {
		return 0, d.fail(index, field, ErrSyntax, "'-' without digits")
	}
	frac, err := d.fraction(index, field)
	if err != nil {
		return 0, err
	}
	end := d.pos
	d.pos = start
	switch {
	case neg:
		return 0, d.fail(index, field, ErrRange, "negative number")
	case frac:
		return 0, d.fail(index, field, ErrRange, "not an integer (fraction or exponent)")
	case over:
		return 0, d.fail(index, field, ErrRange, "number too large")
	}
	d.pos = end
	return v, nil
}

// fraction skips a number's fraction and exponent, if any, and reports
// whether there was either.
func (d *decoder[T]) fraction(index int, field string) (bool, error) {
	frac := false
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		frac = true
		d.pos++
		if !d.digits() {
			return frac, d.fail(index, field, ErrSyntax, "'.' without digits")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		frac = true
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if !d.digits() {
			return frac, d.fail(index, field, ErrSyntax, "exponent without digits")
		}
	}
	return frac, nil
}

func (d *decoder[T]) digits() bool {
	n := 0
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
		n++
	}
	return n > 0
}

// str is a decoded JSON string: raw is the input between the quotes when
// escaped is false; otherwise the decoded bytes are in the decoder's
// scratch buffer until the next string is read.
type str[T input] struct {
	raw     T
	escaped bool
}

// string reads a JSON string. Callers turn it into a Go string with keep.
func (d *decoder[T]) string(index int, field string) (str[T], error) {
	var zero str[T]
	c := d.peek()
	if c != '"' {
		return zero, d.unexpected(index, field, c, "a string")
	}
	d.pos++
	start := d.pos
	// Fast path: printable ASCII without escapes.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := str[T]{raw: d.data[start:d.pos]}
			d.pos++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		d.pos++
	}
	if d.pos >= len(d.data) {
		return zero, d.fail(index, field, ErrSyntax, "unterminated string")
	}
	return d.slowString(index, field, start)
}

// slowString decodes a string with escapes or non-ASCII bytes into
// scratch, following encoding/json: \uXXXX pairs that form a UTF-16
// surrogate pair become one rune, a lone surrogate becomes U+FFFD.
func (d *decoder[T]) slowString(index int, field string, start int) (str[T], error) {
	var zero str[T]
	buf := append(d.scratch[:0], d.data[start:d.pos]...)
	for {
		if d.pos >= len(d.data) {
			return zero, d.fail(index, field, ErrSyntax, "unterminated string")
		}
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			d.scratch = buf
			return str[T]{escaped: true}, nil
		case c < 0x20:
			return zero, d.fail(index, field, ErrSyntax, "control character "+quoteByte(c)+" in string")
		case c < utf8.RuneSelf && c != '\\':
			buf = append(buf, c)
			d.pos++
		case c >= utf8.RuneSelf:
			n := d.validRune()
			if n == 0 {
				return zero, d.fail(index, field, ErrSyntax, "invalid UTF-8 in string")
			}
			buf = append(buf, d.data[d.pos:d.pos+n]...)
			d.pos += n
		default: // backslash
			var err error
			if buf, err = d.escape(index, field, buf); err != nil {
				return zero, err
			}
		}
	}
}

// simpleEscapes maps the byte after a backslash to what it stands for,
// for every escape but \u; 0 means invalid.
var simpleEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escape decodes the escape sequence at pos, appending it to buf.
func (d *decoder[T]) escape(index int, field string, buf []byte) ([]byte, error) {
	if d.pos+1 >= len(d.data) {
		return buf, d.fail(index, field, ErrSyntax, "unterminated escape")
	}
	e := d.data[d.pos+1]
	if e != 'u' {
		c := simpleEscapes[e]
		if c == 0 {
			return buf, d.fail(index, field, ErrSyntax, "invalid escape \\"+string(rune(e)))
		}
		d.pos += 2
		return append(buf, c), nil
	}
	r, ok := d.hex4(d.pos + 2)
	if !ok {
		return buf, d.fail(index, field, ErrSyntax, `malformed \u escape`)
	}
	d.pos += 6
	if utf16.IsSurrogate(r) {
		r2, ok := d.lowSurrogate()
		if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
			d.pos += 6
			r = dec
		} else {
			r = utf8.RuneError
		}
	}
	return utf8.AppendRune(buf, r), nil
}

// lowSurrogate reads the \uXXXX at pos without consuming it, so that a
// following escape that does not complete a pair is decoded on its own.
func (d *decoder[T]) lowSurrogate() (rune, bool) {
	if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
		return d.hex4(d.pos + 2)
	}
	return 0, false
}

func (d *decoder[T]) hex4(at int) (rune, bool) {
	if at+4 > len(d.data) {
		return 0, false
	}
	var r rune
	for i := at; i < at+4; i++ {
		c := d.data[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// validRune returns the length of the valid UTF-8 sequence at pos, or 0.
func (d *decoder[T]) validRune() int {
	var b [utf8.UTFMax]byte
	n := copy(b[:], d.data[d.pos:])
	r, size := utf8.DecodeRune(b[:n])
	if r == utf8.RuneError && size <= 1 {
		return 0
	}
	return size
}

// keep turns a decoded string into a Go string that outlives the
// decoder: free for a substring of string input, a copy otherwise.
func (d *decoder[T]) keep(s str[T]) string {
	if s.escaped {
		return string(d.scratch)
	}
	return string(s.raw)
}

// equal reports whether the decoded string equals k, without allocating.
func (d *decoder[T]) equal(s str[T], k string) bool {
	if s.escaped {
		return string(d.scratch) == k
	}
	return string(s.raw) == k
}

// intern returns prev when s equals it, so that a GPU UUID or profile
// repeated across entries is stored once.
func (d *decoder[T]) intern(s str[T], prev string) string {
	if prev != "" && d.equal(s, prev) {
		return prev
	}
	return d.keep(s)
}

// skipValue checks and skips any JSON value (for tolerated unknown keys).
func (d *decoder[T]) skipValue(index int, field string, depth int) error {
	if depth > maxDepth {
		return d.fail(index, field, ErrSyntax, "nesting too deep")
	}
	switch c := d.peek(); {
	case c == '"':
		_, err := d.string(index, field)
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return d.skipNumber(index, field)
	case c == 't':
		return d.literal(index, field, "true")
	case c == 'f':
		return d.literal(index, field, "false")
	case c == 'n':
		return d.literal(index, field, "null")
	case c == '[':
		return d.skipArray(index, field, depth)
	case c == '{':
		return d.skipObject(index, field, depth)
	default:
		return d.unexpected(index, field, c, "a value")
	}
}

// skipArray checks and skips the array at pos, at nesting depth.
func (d *decoder[T]) skipArray(index int, field string, depth int) error {
	d.pos++
	if d.peek() == ']' {
		d.pos++
		return nil
	}
	for {
		if err := d.skipValue(index, field, depth+1); err != nil {
			return err
		}
		switch c := d.peek(); c {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return nil
		default:
			return d.unexpectedPunct(index, field, c, "',' or ']'")
		}
	}
}

// skipObject checks and skips the object at pos, at nesting depth.
func (d *decoder[T]) skipObject(index int, field string, depth int) error {
	d.pos++
	if d.peek() == '}' {
		d.pos++
		return nil
	}
	for {
		if d.peek() != '"' {
			return d.fail(index, field, ErrSyntax, "want an object key")
		}
		if _, err := d.string(index, field); err != nil {
			return err
		}
		if err := d.colon(index, field); err != nil {
			return err
		}
		if err := d.skipValue(index, field, depth+1); err != nil {
			return err
		}
		switch c := d.peek(); c {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return nil
		default:
			return d.unexpectedPunct(index, field, c, "',' or '}'")
		}
	}
}

func (d *decoder[T]) skipNumber(index int, field string) error {
	if d.data[d.pos] == '-' {
		d.pos++
	}
	if d.pos < len(d.data) && d.data[d.pos] == '0' {
		d.pos++
	} else if !d.digits() {
		return d.fail(index, field, ErrSyntax, "malformed number")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if !d.digits() {
			return d.fail(index, field, ErrSyntax, "'.' without digits")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if !d.digits() {
			return d.fail(index, field, ErrSyntax, "exponent without digits")
		}
	}
	return nil
}

func (d *decoder[T]) literal(index int, field, lit string) error {
	if len(d.data)-d.pos < len(lit) || string(d.data[d.pos:d.pos+len(lit)]) != lit {
		return d.fail(index, field, ErrSyntax, "invalid literal, want "+lit)
	}
	d.pos += len(lit)
	return nil
}
