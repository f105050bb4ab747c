package tend

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// ParseConfig decodes the operator's `[plugins.NAME.config]` (ctx.Config)
// into cfg, a pointer to a struct whose exported fields name their keys with
// `json:"key"` tags. A field tagged `tend:"required"` must be present; an
// `example:"..."` tag is quoted in the error for a missing or wrongly typed
// value. Every failure is an Invalid *Error naming the key, for example
//
//	[plugins.probe.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"
//
// and a key the struct does not have is refused, so a typo does not pass as
// an absent optional value.
func ParseConfig(ctx Context, cfg any) error {
	target := reflect.ValueOf(cfg)
	if target.Kind() != reflect.Pointer || target.Elem().Kind() != reflect.Struct {
		panic("tend.ParseConfig needs a pointer to a struct")
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal([]byte(ctx.Config), &present); err != nil {
		return Errorf(Invalid, "[plugins.%s.config]: expected a table", ctx.Plugin)
	}
	fields := map[string]reflect.StructField{}
	var keys []string
	for _, field := range reflect.VisibleFields(target.Elem().Type()) {
		if !field.IsExported() || field.Anonymous {
			continue
		}
		key := configKey(field)
		fields[key] = field
		keys = append(keys, key)
	}
	var unknown []string
	for key := range present {
		if _, ok := fields[key]; !ok {
			unknown = append(unknown, key)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Errorf(Invalid, "[plugins.%s.config] %s: unknown key; the keys are %s",
			ctx.Plugin, unknown[0], strings.Join(keys, ", "))
	}
	for _, key := range keys {
		field := fields[key]
		raw, ok := present[key]
		if !ok && field.Tag.Get("tend") != "required" {
			continue
		}
		if !ok || json.Unmarshal(raw, target.Elem().FieldByIndex(field.Index).Addr().Interface()) != nil {
			return expected(ctx.Plugin, key, field)
		}
	}
	return nil
}

func configKey(field reflect.StructField) string {
	name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
	if name == "" {
		return field.Name
	}
	return name
}

func expected(plugin, key string, field reflect.StructField) *Error {
	message := fmt.Sprintf("[plugins.%s.config] %s: expected %s", plugin, key, describe(field.Type))
	if example, ok := field.Tag.Lookup("example"); ok {
		if field.Type.Kind() == reflect.String {
			example = strconv.Quote(example)
		}
		message += ", for example " + example
	}
	return &Error{Kind: Invalid, Message: message}
}

// describe is a type as the operator writes it in TOML.
func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(describe(t.Elem()), "a "), "an ") + "s"
	case reflect.Pointer:
		return describe(t.Elem())
	default:
		return "a table"
	}
}
