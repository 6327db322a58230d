package controllers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// statusPatch is a pool's status write: the JSON merge patch of the status fields that
// differ from the pool as the pass read or last wrote it (from), with from's
// resourceVersion when lock is set (the optimistic lock of an intent's write).
//
// Why not client.MergeFrom: it marshals both whole pools and decodes both documents
// into maps to diff them (and deep-copies both first when locked). At 64 hosts a pool's
// status is 570 KB, nearly all of it the workers, and that diff was the largest
// transient of a switch's passes (issue 37, point 3). A merge patch replaces a list
// whole, so a changed worker list is sent whole either way; here the fields are compared
// as Go values, a changed list or scalar is marshalled once, and only the small objects
// present on both sides (the transition, demand, the plan preview...) are diffed as JSON,
// so that a field they no longer set is removed.
type statusPatch struct {
	from *gpupoolv1.GPUPoolProfile
	lock bool
}

// poolStatusPatch is the status write of pool against from (the pool as last read or
// written); lock makes the API server refuse it when the pool changed since.
func poolStatusPatch(from *gpupoolv1.GPUPoolProfile, lock bool) client.Patch {
	return statusPatch{from: from, lock: lock}
}

func (p statusPatch) Type() types.PatchType { return types.MergePatchType }

func (p statusPatch) Data(obj client.Object) ([]byte, error) {
	to, ok := obj.(*gpupoolv1.GPUPoolProfile)
	if !ok {
		return nil, fmt.Errorf("a pool's status patch is for a GPUPoolProfile, not %T", obj)
	}
	status, err := mergePatchOf(&p.from.Status, &to.Status)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	if p.lock {
		rv := p.from.ResourceVersion
		if rv == "" {
			return nil, fmt.Errorf("a locked status patch of pool %s needs the resourceVersion it was read at", to.Name)
		}
		b.WriteString(`"metadata":{"resourceVersion":`)
		writeJSON(&b, rv)
		b.WriteByte('}')
		if status != nil {
			b.WriteByte(',')
		}
	}
	if status != nil {
		b.WriteString(`"status":`)
		b.Write(status)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// mergePatchOf is the JSON merge patch (RFC 7386) that turns the JSON of *from into the
// JSON of *to, both pointers to the same struct type, or nil when they are equal. A field
// equal on both sides (equality.Semantic) is left out; one that the new JSON omits is
// null; a list, a scalar, or an object that was absent is sent whole; an object present
// on both sides is diffed as JSON (jsonpatch.CreateMergePatch), field by field.
func mergePatchOf(from, to any) ([]byte, error) {
	fv, tv := reflect.ValueOf(from).Elem(), reflect.ValueOf(to).Elem()
	if fv.Type() != tv.Type() || fv.Kind() != reflect.Struct {
		return nil, fmt.Errorf("a merge patch of %s into %s", fv.Type(), tv.Type())
	}
	var b bytes.Buffer
	fields := 0
	for i := range tv.NumField() {
		f := tv.Type().Field(i)
		name, omit, ok := jsonField(f)
		if !ok {
			continue
		}
		a, z := fv.Field(i), tv.Field(i)
		if equality.Semantic.DeepEqual(a.Interface(), z.Interface()) {
			continue
		}
		value, err := fieldPatch(a, z, omit)
		if err != nil {
			return nil, fmt.Errorf("status.%s: %w", name, err)
		}
		if value == nil {
			continue // equal as JSON (a time within its second, say)
		}
		if fields > 0 {
			b.WriteByte(',')
		}
		fields++
		writeJSON(&b, name)
		b.WriteByte(':')
		b.Write(value)
	}
	if fields == 0 {
		return nil, nil
	}
	return append(append([]byte{'{'}, b.Bytes()...), '}'), nil
}

// jsonField is a struct field's JSON name and how encoding/json tells that it omits
// the field's value; ok is false for a field JSON leaves out (unexported, "-", or
// embedded: the status types embed none).
func jsonField(f reflect.StructField) (name string, omit func(reflect.Value) bool, ok bool) {
	tag := f.Tag.Get("json")
	if !f.IsExported() || tag == "-" || f.Anonymous {
		return "", nil, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	omitEmpty, omitZero := false, false
	for _, o := range strings.Split(opts, ",") {
		omitEmpty = omitEmpty || o == "omitempty"
		omitZero = omitZero || o == "omitzero"
	}
	return name, func(v reflect.Value) bool {
		return (omitEmpty && emptyJSON(v)) || (omitZero && v.IsZero())
	}, true
}

// emptyJSON is encoding/json's "empty" for omitempty.
func emptyJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// fieldPatch is the merge patch of one field from a to z: null when z's JSON omits it,
// z's JSON when a's omits it or either is not a JSON object (a list is replaced whole),
// else the merge patch of the two objects; nil when their JSON is equal.
func fieldPatch(a, z reflect.Value, omit func(reflect.Value) bool) ([]byte, error) {
	if omit(z) {
		return []byte("null"), nil
	}
	now, err := json.Marshal(z.Interface())
	if err != nil || omit(a) || now[0] != '{' {
		return now, err
	}
	was, err := json.Marshal(a.Interface())
	if err != nil {
		return nil, err
	}
	if was[0] != '{' {
		return now, nil
	}
	p, err := jsonpatch.CreateMergePatch(was, now)
	if err != nil || bytes.Equal(p, []byte("{}")) {
		return nil, err
	}
	return p, nil
}

func writeJSON(b *bytes.Buffer, s string) {
	v, _ := json.Marshal(s) // a string always marshals
	b.Write(v)
}
