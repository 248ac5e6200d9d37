package jetstream

import (
	"errors"
	"fmt"
	"strings"
)

// The key encoding: a task_id becomes the part of its subject after "$KV.<bucket>."
// (the KV key, in `nats kv` words). See doc.go, "Keys and subjects", for why.
//
//   - '/' becomes '.', the subject token separator: each '/'-separated segment of
//     the task_id is one token;
//   - an empty segment (a leading, trailing or doubled '/') becomes the token "=",
//     since NATS refuses empty tokens;
//   - the bytes [A-Za-z0-9_-] stay as they are;
//   - every other byte becomes "=HH", its value in two upper-case hex digits.
//
// So the output holds only [A-Za-z0-9_=.-], never starts or ends with '.' nor has
// "..": a valid KV key and subject suffix. "=" alone is a token only for an empty
// segment, and '=' is otherwise always followed by two hex digits: the encoding is
// reversible (decodeKey).

// MaxKeyBytes is the longest encoded key of a task_id of maxTaskID bytes: three
// bytes per byte ("=HH"); a '/' or an empty segment costs less.
func MaxKeyBytes(maxTaskID int) int { return 3 * maxTaskID }

const hexDigits = "0123456789ABCDEF"

// plain reports whether b stays as it is in a key.
func plain(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_'
}

// encodeKey is the KV key of taskID (non-empty).
func encodeKey(taskID string) string {
	var sb strings.Builder
	sb.Grow(len(taskID) + len(taskID)/4)
	appendKey(&sb, taskID)
	return sb.String()
}

// appendKey writes the key of taskID to sb. An empty taskID writes "=" (one empty
// segment), which no task_id has: the node refuses an empty task_id.
func appendKey(sb *strings.Builder, taskID string) {
	segStart := true // the next byte starts a segment
	for i := 0; i < len(taskID); i++ {
		c := taskID[i]
		switch {
		case c == '/':
			if segStart {
				sb.WriteByte('=') // the segment that ends here is empty
			}
			sb.WriteByte('.')
			segStart = true
			continue
		case plain(c):
			sb.WriteByte(c)
		default:
			sb.WriteByte('=')
			sb.WriteByte(hexDigits[c>>4])
			sb.WriteByte(hexDigits[c&0xF])
		}
		segStart = false
	}
	if segStart {
		sb.WriteByte('=') // the last segment is empty (or the task_id is)
	}
}

// errKey is the class of a key that is not an encoding of a task_id.
var errKey = errors.New("jetstream: not a key this transport writes")

// decodeKey is the task_id whose key is key. It refuses anything encodeKey does not
// write, naming the offset, so that decodeKey(k) == t exactly when encodeKey(t) == k.
func decodeKey(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty", errKey)
	}
	out := make([]byte, 0, len(key))
	tokStart := 0
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '.':
			if i == tokStart {
				return "", fmt.Errorf("%w: empty token at offset %d", errKey, i)
			}
			out = append(out, '/')
			tokStart = i + 1
		case plain(c):
			out = append(out, c)
		case c == '=' && (i+1 == len(key) || key[i+1] == '.'):
			if i != tokStart {
				return "", fmt.Errorf("%w: \"=\" ends a token that is not empty at offset %d", errKey, i)
			}
			// The empty segment: nothing to write.
		case c == '=' && i+2 < len(key) && unhex(key[i+1]) >= 0 && unhex(key[i+2]) >= 0:
			b := byte(unhex(key[i+1])<<4 | unhex(key[i+2]))
			if plain(b) || b == '/' {
				return "", fmt.Errorf("%w: %q at offset %d escapes a byte that is written as itself", errKey, key[i:i+3], i)
			}
			out = append(out, b)
			i += 2
		default:
			return "", fmt.Errorf("%w: byte %q at offset %d", errKey, c, i)
		}
	}
	if tokStart == len(key) {
		return "", fmt.Errorf("%w: ends with '.'", errKey)
	}
	return string(out), nil
}

// unhex is the value of an upper-case hex digit, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// prefixFilter is the KV key filter (a subject suffix, maybe ending in the ">"
// wildcard) that matches the key of every task_id with the given prefix, and exact
// reports whether it matches only those: the prefix's whole segments are whole
// tokens, so a prefix that ends with '/' ("app/") is exactly the filter "app.>". A
// prefix that ends inside a segment ("app/in") matches on its whole segments
// ("app.>") and the caller keeps the task_ids that have the prefix (exact false). The
// empty prefix is ">" (every key), exact.
func prefixFilter(prefix string) (filter string, exact bool) {
	cut := strings.LastIndexByte(prefix, '/')
	if cut < 0 {
		return ">", prefix == ""
	}
	var sb strings.Builder
	appendKey(&sb, prefix[:cut])
	sb.WriteString(".>")
	return sb.String(), cut == len(prefix)-1
}
