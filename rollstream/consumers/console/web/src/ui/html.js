// htm bound to Preact: tagged templates instead of JSX, so there is no JSX
// transform in the build.
import { h } from 'preact';
import htm from 'htm';

export const html = htm.bind(h);
