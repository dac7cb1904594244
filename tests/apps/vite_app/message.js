export const message = "vite says one";
