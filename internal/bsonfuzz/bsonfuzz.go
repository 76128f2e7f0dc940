// Package bsonfuzz turns fuzz input into BSON documents for fuzz tests of code reading server
// replies: random bytes are almost never a valid document, so Doc builds one whose shape the
// bytes choose, with field names the reader looks for.
package bsonfuzz

import (
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// maxDepth bounds the documents built; readers bound their own walks.
const maxDepth = 12

// Doc returns data itself when it is a valid BSON document (seeds taken from
// real replies), and otherwise a document built from data: each byte picks
// how many fields a document has, which of keys each is named, its type and
// its value (strings come from strs or from data itself).
func Doc(data []byte, keys, strs []string) bson.Raw {
	if bson.Raw(data).Validate() == nil {
		return bson.Raw(data)
	}
	b := builder{data: data, keys: keys, strs: strs}
	return bson.Raw(b.doc(0, false))
}

type builder struct {
	data       []byte
	keys, strs []string
}

func (b *builder) next() byte {
	if len(b.data) == 0 {
		return 0
	}
	c := b.data[0]
	b.data = b.data[1:]
	return c
}

// doc builds a document of up to 5 fields, or an array (keys "0", "1", …) of up to 3 elements.
func (b *builder) doc(depth int, array bool) []byte {
	c := b.next()
	n := int(c % 6)
	if array {
		n = int(c % 4)
	}
	elems := make([][]byte, 0, n)
	for i := range n {
		key := "x"
		if array {
			key = strconv.Itoa(i)
		} else if len(b.keys) > 0 {
			key = b.keys[int(b.next())%len(b.keys)]
		}
		elems = append(elems, b.element(key, depth))
	}
	return bsoncore.BuildDocument(nil, elems...)
}

func (b *builder) element(key string, depth int) []byte {
	switch b.next() % 10 {
	case 0:
		return bsoncore.AppendStringElement(nil, key, b.str())
	case 1:
		return bsoncore.AppendInt32Element(nil, key, int32(int8(b.next())))
	case 2:
		return bsoncore.AppendInt64Element(nil, key, int64(int8(b.next()))<<32)
	case 3:
		return bsoncore.AppendDoubleElement(nil, key, float64(int8(b.next()))/2)
	case 4:
		return bsoncore.AppendBooleanElement(nil, key, b.next()%2 == 0)
	case 6:
		return bsoncore.AppendDateTimeElement(nil, key, int64(b.next())*1e9)
	case 7, 8:
		if depth < maxDepth {
			return bsoncore.AppendDocumentElement(nil, key, b.doc(depth+1, false))
		}
	case 9:
		if depth < maxDepth {
			return bsoncore.AppendArrayElement(nil, key, b.doc(depth+1, true))
		}
	}
	return bsoncore.AppendNullElement(nil, key) // 5, and nesting past maxDepth
}

func (b *builder) str() string {
	c := b.next()
	if c%4 == 0 || len(b.strs) == 0 {
		// A few of the input's own bytes: any UTF-8 or not.
		n := min(int(c%16), len(b.data))
		s := string(b.data[:n])
		b.data = b.data[n:]
		return s
	}
	return b.strs[int(c)%len(b.strs)]
}
