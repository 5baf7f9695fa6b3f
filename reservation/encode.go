package reservation

import (
	"strconv"
	"unicode/utf8"
)

// Encode returns the annotation value for allocs exactly as the deployed
// writer (Go's encoding/json with its default HTML-safe escaping) produces
// it: keys in wire order, migUUID omitted when empty, gpuInstanceID and
// computeInstanceID omitted when absent. A nil or empty allocs encodes as
// "[]"; callers that want to remove the annotation do so themselves.
//
// Encode does not validate; call [Validate] first when allocs come from
// elsewhere than [Decode].
func Encode(allocs []Allocation) []byte {
	return AppendEncode(make([]byte, 0, 192*len(allocs)+2), allocs)
}

// EncodeString is [Encode] returning a string, the type Kubernetes
// annotations have.
func EncodeString(allocs []Allocation) string {
	return string(Encode(allocs))
}

// AppendEncode appends the encoding of allocs to dst and returns the
// extended buffer.
func AppendEncode(dst []byte, allocs []Allocation) []byte {
	dst = append(dst, '[')
	for i := range allocs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendAllocation(dst, &allocs[i])
	}
	return append(dst, ']')
}

func appendAllocation(dst []byte, a *Allocation) []byte {
	dst = append(dst, `{"containerIndex":`...)
	dst = strconv.AppendInt(dst, int64(a.ContainerIndex), 10)
	dst = append(dst, `,"deviceIndex":`...)
	dst = strconv.AppendInt(dst, int64(a.DeviceIndex), 10)
	dst = append(dst, `,"gpuUUID":`...)
	dst = appendJSONString(dst, a.GPUUUID)
	dst = append(dst, `,"profile":`...)
	dst = appendJSONString(dst, a.Profile)
	dst = append(dst, `,"placement":{"start":`...)
	dst = strconv.AppendUint(dst, uint64(a.Placement.Start), 10)
	dst = append(dst, `,"size":`...)
	dst = strconv.AppendUint(dst, uint64(a.Placement.Size), 10)
	dst = append(dst, '}')
	if a.MIGUUID != "" {
		dst = append(dst, `,"migUUID":`...)
		dst = appendJSONString(dst, a.MIGUUID)
	}
	if a.GPUInstanceID.Valid {
		dst = append(dst, `,"gpuInstanceID":`...)
		dst = strconv.AppendUint(dst, uint64(a.GPUInstanceID.ID), 10)
	}
	if a.ComputeInstanceID.Valid {
		dst = append(dst, `,"computeInstanceID":`...)
		dst = strconv.AppendUint(dst, uint64(a.ComputeInstanceID.ID), 10)
	}
	return append(dst, '}')
}

// appendJSONString quotes s the way encoding/json does with HTML escaping
// on (json.Marshal's default): short escapes for \" \\ \b \f \n \r \t,
// \u00XX for other control characters and for < > &, \u2028 and \u2029
// escaped, invalid UTF-8 replaced by \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
