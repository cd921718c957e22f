// Errors from a data source carry the HTTP status so pages can tell "not
// found" from a refused token.
export class SourceError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.name = 'SourceError';
    this.status = status;
  }
}
