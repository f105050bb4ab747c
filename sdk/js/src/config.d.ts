import type { Context } from "./wit.js";

/** One config key: what it holds, and how the error about it reads. */
export interface Field<T> {
  readonly what: string;
}
export interface Options<T> {
  /** Shown in the error: `expected a string, for example "..."`. */
  example?: T;
  /** Makes the key optional. */
  default?: T;
}
export function string(options?: Options<string>): Field<string>;
export function integer(options?: Options<number>): Field<number>;
export function number(options?: Options<number>): Field<number>;
export function boolean(options?: Options<boolean>): Field<boolean>;
export function list<T>(item: Field<T>, options?: Options<T[]>): Field<T[]>;
export function table<S extends Record<string, Field<unknown>>>(fields: S, options?: Options<Parsed<S>>): Field<Parsed<S>>;

export type Parsed<S> = { [K in keyof S]: S[K] extends Field<infer T> ? T : never };

/**
 * `ctx.config` read against `fields` (camelCase keys read the config's kebab-case
 * keys), or an `InvalidError`: `[plugins.NAME.config] url: expected a string, for example "..."`.
 * A key `fields` does not name is refused: `[plugins.NAME.config] urls: unknown key; expected one of url`.
 */
export function read<S extends Record<string, Field<unknown>>>(ctx: Pick<Context, "plugin" | "config">, fields: S): Parsed<S>;
