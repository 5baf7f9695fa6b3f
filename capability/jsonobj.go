package capability

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The decoders in this package read JSON structurally rather than through
// struct tags, because encoding/json matches keys case-insensitively, keeps
// the last of duplicate keys and ignores unknown ones: all three would let a
// typo pass silently.

// jsonMember is one key/value pair of a JSON object, in document order.
type jsonMember struct {
	Key   string
	Value json.RawMessage
}

// jsonKind returns the first significant byte of a JSON value: '{', '[',
// '"', 'n', 't', 'f' or a number's first byte; 0 for empty input.
func jsonKind(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

func isNull(raw json.RawMessage) bool { return jsonKind(raw) == 'n' }

// kindName names a JSON value's type for error messages.
func kindName(raw json.RawMessage) string {
	switch jsonKind(raw) {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case 0:
		return "nothing"
	}
	return "a number"
}

// duplicateKeyError reports a key that occurs twice in one object.
type duplicateKeyError struct{ Key string }

func (e *duplicateKeyError) Error() string { return fmt.Sprintf("duplicate key %q", e.Key) }

// joinField returns field extended by the duplicate key err reports, or
// field unchanged.
func joinField(field string, err error) string {
	var dup *duplicateKeyError
	if !errors.As(err, &dup) {
		return field
	}
	if field == "" {
		return dup.Key
	}
	return field + "." + dup.Key
}

// objectMembers splits a JSON object into its members. The input must be a
// single valid JSON value; duplicate keys are an error naming the key.
func objectMembers(raw json.RawMessage) ([]jsonMember, error) {
	if jsonKind(raw) != '{' {
		return nil, fmt.Errorf("want an object, got %s", kindName(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var members []jsonMember
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key is %v, not a string", tok)
		}
		if seen[key] {
			return nil, &duplicateKeyError{Key: key}
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		members = append(members, jsonMember{Key: key, Value: v})
	}
	return members, nil
}

// arrayElems splits a JSON array into its elements.
func arrayElems(raw json.RawMessage) ([]json.RawMessage, error) {
	if jsonKind(raw) != '[' {
		return nil, fmt.Errorf("want a list, got %s", kindName(raw))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, err
	}
	return elems, nil
}

// jsonString decodes a JSON string.
func jsonString(raw json.RawMessage) (string, error) {
	if jsonKind(raw) != '"' {
		return "", fmt.Errorf("want a string, got %s", kindName(raw))
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// jsonNumber decodes a JSON number into an integer type; floats, exponents
// and out-of-range values are errors.
func jsonNumber[T ~int | ~int32 | ~uint32 | ~uint64](raw json.RawMessage, v *T) error {
	if k := jsonKind(raw); k != '-' && (k < '0' || k > '9') {
		return fmt.Errorf("want an integer, got %s", kindName(raw))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("want an integer in range: %s", bytes.TrimSpace(raw))
	}
	return nil
}

// jsonBool decodes a JSON boolean.
func jsonBool(raw json.RawMessage) (bool, error) {
	if k := jsonKind(raw); k != 't' && k != 'f' {
		return false, fmt.Errorf("want a boolean, got %s", kindName(raw))
	}
	var b bool
	err := json.Unmarshal(raw, &b)
	return b, err
}
