/** A UUID in its canonical text form, any case (ids from URLs, headers, tokens and form fields). */
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
